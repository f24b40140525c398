/* jemalloc linked in statically (Debian's libjemalloc.a): holds blocks in two arenas, frees
 * most of them so that dirty pages and slack remain, then prints its own mallctl figures
 * and says "ready". Each line on stdin makes it print them again; it exits when stdin closes.
 * Built by tests/live/test_jemalloc_deep.py, which checks `memgap inspect --deep` against the
 * figures the program prints itself.
 *
 * Arguments (both optional): COUNT, the blocks per arena (20000); RETAIN_MIB, MiB of large
 * blocks mapped, freed untouched and purged before the print, which leaves that much address
 * space retained (jemalloc keeps it mapped, not resident).
 *
 * Built with -DPREFIX=je_ against a libjemalloc.a whose API carries that prefix (as Redis
 * links it) it calls jemalloc as je_malloc, je_free, je_mallctl, while glibc's malloc serves
 * the C library and the program's plain malloc calls, which hold and free a share of their
 * own; the line then adds glibc's own mallinfo2 figures (g_in_use, g_free, g_mmapped). */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PREFIX
#define JE_(p, n) p##n
#define JE__(p, n) JE_(p, n)
#define JE(n) JE__(PREFIX, n)
void *JE(malloc)(size_t size);
void JE(free)(void *p);
#else
#define JE(n) n
#endif

int JE(mallctl)(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

/* Read by jemalloc at start-up. A long decay: the dirty pages stay put between the program's
 * print and memgap's read (jemalloc purges on its own only as allocation events tick). */
const char *JE(malloc_conf) = "dirty_decay_ms:30000,muzzy_decay_ms:0,narenas:4";

static int count = 20000;

static void hold_and_free(size_t size, int keep_every) {
    void **p = JE(malloc)(count * sizeof *p);
    for (int i = 0; i < count; i++) {
        p[i] = JE(malloc)(size + i % 64);
        memset(p[i], 1, size);
    }
    /* the first three quarters go (whole pages become dirty), then every keep_every-th of the rest
       (slack within pages that stay active) */
    for (int i = 0; i < count; i++)
        if (i < count * 3 / 4 || i % keep_every) JE(free)(p[i]);
}

static void *other_arena(void *arg) {
    unsigned arena;
    size_t len = sizeof arena;
    JE(mallctl)("arenas.create", &arena, &len, NULL, 0);  /* this thread's allocations in an arena of their own */
    JE(mallctl)("thread.arena", NULL, NULL, &arena, sizeof arena);
    hold_and_free(1000, 3);
    return arg;
}

static void retain(int mib) {
    /* mapped and freed without a write (no page resident), then purged: the extents stay mapped,
       retained for reuse (opt.retain) */
    void *p[256];
    int n = mib / 4 < 256 ? mib / 4 : 256;
    for (int i = 0; i < n; i++) p[i] = JE(malloc)(4 << 20);
    for (int i = 0; i < n; i++) JE(free)(p[i]);
    JE(mallctl)("arena.4096.purge", NULL, NULL, NULL, 0);
}

#ifdef PREFIX
static void glibc_share(void) {
    /* 8 MB of 4000-byte blocks in glibc's main arena, seven of every eight of the first half freed
       (free chunks of 28 KB, whole pages the walk finds), and one 4 MiB block glibc serves with mmap */
    static void *p[2000];
    for (int i = 0; i < 2000; i++) {
        p[i] = malloc(4000);
        memset(p[i], 2, 4000);
    }
    for (int i = 0; i < 1000; i++)
        if (i % 8) free(p[i]);
    void *big = malloc(4 << 20);
    memset(big, 3, 4 << 20);
}
#endif

static size_t get(const char *name) {
    size_t value = 0, len = sizeof value;
    return JE(mallctl)(name, &value, &len, NULL, 0) == 0 ? value : (size_t)-1;
}

static void print_stats(void) {
    uint64_t epoch = 1;
    size_t len = sizeof epoch;
    JE(mallctl)("epoch", &epoch, &len, &epoch, len);
    unsigned narenas = 0;
    len = sizeof narenas;
    JE(mallctl)("arenas.narenas", &narenas, &len, NULL, 0);
    printf("allocated=%zu active=%zu resident=%zu retained=%zu mapped=%zu metadata=%zu pdirty=%zu pmuzzy=%zu "
           "narenas=%u", get("stats.allocated"), get("stats.active"), get("stats.resident"), get("stats.retained"),
           get("stats.mapped"), get("stats.metadata"), get("stats.arenas.4096.pdirty"),
           get("stats.arenas.4096.pmuzzy"), narenas);
#ifdef PREFIX
    struct mallinfo2 g = mallinfo2();
    printf(" g_in_use=%zu g_free=%zu g_mmapped=%zu g_arena=%zu", g.uordblks, g.fordblks, g.hblkhd, g.arena);
#endif
    printf("\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc > 1) count = atoi(argv[1]);
    if (argc > 2) retain(atoi(argv[2]));
#ifdef PREFIX
    glibc_share();
#endif
    hold_and_free(300, 2);
    pthread_t t;
    pthread_create(&t, NULL, other_arena, NULL);
    pthread_join(t, NULL);
    print_stats();
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin))
        print_stats();
    return 0;
}
