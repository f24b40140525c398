/* A C program that knows nothing of memgap: a 64 MiB static array (zero-initialised: the loader maps
 * it as the program's .bss), of which it writes the first TOUCH_MIB MiB (argv[1], 64 by default), then
 * prints "ready ADDRESS SIZE TOUCHED" and waits for its stdin to close. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SIZE (64UL << 20)
static char data[SIZE];

int main(int argc, char **argv) {
    unsigned long touched = (argc > 1 ? strtoul(argv[1], NULL, 10) : 64) << 20;
    if (touched > SIZE) touched = SIZE;
    long page = sysconf(_SC_PAGESIZE);
    for (unsigned long i = 0; i < touched; i += (unsigned long)page) data[i] = (char)(i / page + 1);
    printf("ready %p %lu %lu\n", (void *)data, SIZE, touched);
    fflush(stdout);
    char buf[64];
    while (fgets(buf, sizeof buf, stdin) != NULL) {}
    return data[page] == 0;
}
