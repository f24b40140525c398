/* jemalloc linked in statically (Debian's libjemalloc.a): holds blocks in two arenas, frees
 * most of them so that dirty pages and slack remain, then prints its own mallctl figures
 * and says "ready". Each line on stdin makes it print them again; it exits when stdin closes.
 * Built by tests/test_jemalloc_deep.py, which checks `memgap inspect --deep` against the
 * figures the program prints itself. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

/* Read by jemalloc at start-up. A long decay: the dirty pages stay put between the program's
 * print and memgap's read (jemalloc purges on its own only as allocation events tick). */
const char *malloc_conf = "dirty_decay_ms:30000,muzzy_decay_ms:0,narenas:4";

#define COUNT 20000

static void hold_and_free(size_t size, int keep_every) {
    void **p = malloc(COUNT * sizeof *p);
    for (int i = 0; i < COUNT; i++) {
        p[i] = malloc(size + i % 64);
        memset(p[i], 1, size);
    }
    /* the first three quarters go (whole pages become dirty), then every keep_every-th of the rest
       (slack within pages that stay active) */
    for (int i = 0; i < COUNT; i++)
        if (i < COUNT * 3 / 4 || i % keep_every) free(p[i]);
}

static void *other_arena(void *arg) {
    unsigned arena;
    size_t len = sizeof arena;
    mallctl("arenas.create", &arena, &len, NULL, 0);  /* this thread's allocations in an arena of their own */
    mallctl("thread.arena", NULL, NULL, &arena, sizeof arena);
    hold_and_free(1000, 3);
    return arg;
}

static size_t get(const char *name) {
    size_t value = 0, len = sizeof value;
    return mallctl(name, &value, &len, NULL, 0) == 0 ? value : (size_t)-1;
}

static void print_stats(void) {
    uint64_t epoch = 1;
    size_t len = sizeof epoch;
    mallctl("epoch", &epoch, &len, &epoch, len);
    unsigned narenas = 0;
    len = sizeof narenas;
    mallctl("arenas.narenas", &narenas, &len, NULL, 0);
    printf("allocated=%zu active=%zu resident=%zu retained=%zu mapped=%zu metadata=%zu pdirty=%zu pmuzzy=%zu "
           "narenas=%u\n", get("stats.allocated"), get("stats.active"), get("stats.resident"), get("stats.retained"),
           get("stats.mapped"), get("stats.metadata"), get("stats.arenas.4096.pdirty"),
           get("stats.arenas.4096.pmuzzy"), narenas);
    fflush(stdout);
}

int main(void) {
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
