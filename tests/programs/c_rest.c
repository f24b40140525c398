/* A C program that knows nothing of memgap: a burst of small mallocs, most of
 * them freed (glibc keeps the pages), its own RSS printed, then a rest. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    enum { N = 40000 };
    static char *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(2048);
        for (int j = 0; j < 2048; j += 512) blocks[i][j] = 1;
    }
    for (int i = 0; i < N; i++)
        if (i % 16) free(blocks[i]);
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%*ld %ld", &pages) != 1) return 1;
    fclose(f);
    printf("rss %ld\n", pages * sysconf(_SC_PAGESIZE));
    fflush(stdout);
    usleep((useconds_t)(atof(argc > 1 ? argv[1] : "2") * 1e6));
    return 0;
}
