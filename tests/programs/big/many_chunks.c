/* A C heap of millions of live chunks, as a C++ program's registries or an interpreter's caches hold:
   N blocks (default 1,800,000) of 16-256 bytes kept live in glibc's main arena, one large buffer
   (default 1 GiB, touched), and every fourth small block freed so the bins hold chunks too.
   Prints "ready <pid> <blocks live> <bytes in use> <bytes free>" (the last two glibc's own count at
   rest, mallinfo2: uordblks + hblkhd, and fordblks) and waits for stdin to close.

   With a third argument, that many bytes are taken with sbrk() before the first malloc: memory of the
   program's own at the start of [heap], before glibc's first chunk.

       cc -O2 -o many_chunks many_chunks.c && ./many_chunks [blocks] [buffer MiB] [sbrk bytes] */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    static char out[4096];  /* stdout's buffer, not malloc's: the count below is the blocks' alone */
    setvbuf(stdout, out, _IOFBF, sizeof out);
    long n = argc > 1 ? atol(argv[1]) : 1800000;
    long buffer_mib = argc > 2 ? atol(argv[2]) : 1024;
    long foreign = argc > 3 ? atol(argv[3]) : 0;
    if (foreign > 0) {
        char *own = sbrk((intptr_t)foreign);
        if (own == (void *)-1) return 1;
        memset(own, 0x5a, (size_t)foreign);
    }
    void **blocks = malloc(sizeof(void *) * (size_t)n);
    unsigned seed = 12345;
    size_t live = 0;
    for (long i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t size = 16 + (seed >> 16) % 241;
        blocks[i] = malloc(size);
        memset(blocks[i], (int)(i & 0xff), size);
    }
    for (long i = 0; i < n; i += 4) {  /* holes among the live blocks: the bins are not empty */
        free(blocks[i]);
        blocks[i] = NULL;
    }
    for (long i = 0; i < n; i++)
        if (blocks[i]) live++;
    char *buffer = NULL;
    if (buffer_mib > 0) {
        buffer = malloc((size_t)buffer_mib << 20);
        for (size_t off = 0; off < ((size_t)buffer_mib << 20); off += 4096) buffer[off] = 1;
    }
    struct mallinfo2 own = mallinfo2();
    printf("ready %d %zu %zu %zu\n", getpid(), live, own.uordblks + own.hblkhd, own.fordblks);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {}
    free(buffer);
    return 0;
}
