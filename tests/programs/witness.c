/* A witness for memgap's layers: holds and frees known amounts on command and
   says what it did, measured by itself (its allocator's own counters, VmRSS).

   One command a line on stdin, one reply a line on stdout:
     heap MIB       malloc MIB MiB in 4 KiB chunks, touch them, free 3 of every 4
                    runs of 1 MiB (the freed runs coalesce into 3 MiB chunks in bins;
                    one chunk after them pins the top, so free() gives nothing back)
     trim           malloc_trim(0), jemalloc's purge of all arenas or tcmalloc's release
     file PATH      mmap PATH read-only and read every page
     anon MIB       mmap MIB MiB private anonymous memory and write every page
     threads N KIB  start N threads that each write KIB KiB of their stack, then block
     spin N KIB     the same, but the threads then spin on the CPU and never block
     stats          the allocator's own counters (glibc, jemalloc or tcmalloc)
   Replies are "ok key=value ..." with bytes; "err ..." on failure.
   Nothing here uses stdio: its buffers would come from malloc and move the counters. */
#define _GNU_SOURCE
#include <alloca.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KIB 1024L
#define MIB (1024L * 1024L)
#define CHUNK (4 * KIB - 16)   /* a 4 KiB chunk with its header */

static void reply(const char *fmt, ...) {
    char out[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof out - 1, fmt, ap);  /* no allocation for %ld and %s */
    va_end(ap);
    if (n < 0) n = 0;
    if (n > (int)sizeof out - 2) n = (int)sizeof out - 2;
    out[n++] = '\n';
    (void)!write(1, out, (size_t)n);
}

static long rss_bytes(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *line = strstr(buf, "VmRSS:");
    return line ? atol(line + 6) * KIB : -1;
}

/* The allocator's own figures, found at run time: whichever allocator was preloaded. */
static void stats(void) {
    int (*mallctl)(const char *, void *, size_t *, void *, size_t) = dlsym(RTLD_DEFAULT, "mallctl");
    int (*tc_get)(const char *, size_t *) = dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
    if (mallctl) {
        uint64_t epoch = 1;
        size_t len = sizeof epoch, allocated = 0, resident = 0, slen = sizeof(size_t);
        mallctl("epoch", &epoch, &len, &epoch, len);
        mallctl("stats.allocated", &allocated, &slen, NULL, 0);
        slen = sizeof(size_t);
        mallctl("stats.resident", &resident, &slen, NULL, 0);
        reply("ok allocator=jemalloc allocated=%zu resident=%zu rss=%ld", allocated, resident, rss_bytes());
    } else if (tc_get) {
        size_t allocated = 0, heap = 0, unmapped = 0;
        tc_get("generic.current_allocated_bytes", &allocated);
        tc_get("generic.heap_size", &heap);
        tc_get("tcmalloc.pageheap_unmapped_bytes", &unmapped);
        reply("ok allocator=tcmalloc allocated=%zu heap_size=%zu unmapped=%zu rss=%ld", allocated, heap,
              unmapped, rss_bytes());
    } else {
        struct mallinfo2 mi = mallinfo2();
        reply("ok allocator=glibc uordblks=%zu hblkhd=%zu fordblks=%zu arena=%zu keepcost=%zu rss=%ld",
              mi.uordblks, mi.hblkhd, mi.fordblks, mi.arena, mi.keepcost, rss_bytes());
    }
}

static void heap(long mib) {
    long n = mib * MIB / (4 * KIB), run = MIB / (4 * KIB), kept = 0;
    char **chunks = mmap(NULL, (size_t)n * sizeof *chunks, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  /* the index stays out of malloc */
    for (long i = 0; i < n; i++) {
        chunks[i] = malloc(CHUNK);
        memset(chunks[i], 0x5a, CHUNK);
    }
    char *pin = malloc(CHUNK);
    memset(pin, 0x5a, CHUNK);
    for (long i = 0; i < n; i++) {
        if ((i / run) % 4 == 0) kept += CHUNK;
        else free(chunks[i]);
    }
    munmap(chunks, (size_t)n * sizeof *chunks);
    reply("ok kept=%ld freed=%ld rss=%ld", kept, n * CHUNK - kept, rss_bytes());
}

static void trim(void) {
    int (*mallctl)(const char *, void *, size_t *, void *, size_t) = dlsym(RTLD_DEFAULT, "mallctl");
    void (*tc_release)(void) = dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory");
    long before = rss_bytes();
    if (mallctl) mallctl("arena.4096.purge", NULL, NULL, NULL, 0);  /* MALLCTL_ARENAS_ALL */
    else if (tc_release) tc_release();
    else malloc_trim(0);
    long after = rss_bytes();
    reply("ok before=%ld after=%ld released=%ld", before, after, before - after);
}

static void map_file(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) { reply("err open %s", path); return; }
    volatile const char *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { reply("err mmap %s", path); return; }
    long sum = 0;
    for (long i = 0; i < st.st_size; i += 4 * KIB) sum += p[i];
    reply("ok mapped=%ld sum=%ld rss=%ld", (long)st.st_size, sum, rss_bytes());
}

static void anon(long mib) {
    char *p = mmap(NULL, (size_t)(mib * MIB), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { reply("err mmap"); return; }
    for (long i = 0; i < mib * MIB; i += 4 * KIB) p[i] = 0x5a;
    reply("ok mapped=%ld rss=%ld", mib * MIB, rss_bytes());
}

static pthread_barrier_t started;
static long stack_kib;

static void *stack_toucher(void *spin) {
    char *depth = alloca((size_t)(stack_kib * KIB));
    memset(depth, 0x5a, (size_t)(stack_kib * KIB));
    __asm__ volatile("" : : "r"(depth) : "memory");  /* keep the frame and its writes */
    pthread_barrier_wait(&started);
    if (spin)
        for (;;) __asm__ volatile("" : : : "memory");  /* on the CPU: no syscall, no stack pointer in /proc */
    for (;;) pause();  /* blocked in a syscall: /proc/PID/task/TID/syscall shows its stack pointer */
    return NULL;
}

static void threads(long n, long kib, int spin) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)(kib * KIB + MIB));
    stack_kib = kib;
    pthread_barrier_init(&started, NULL, (unsigned)n + 1);
    for (long i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, &attr, stack_toucher, spin ? &stack_kib : NULL);
    }
    pthread_barrier_wait(&started);
    reply("ok threads=%ld touched=%ld rss=%ld", n, n * kib * KIB, rss_bytes());
}

int main(void) {
    char line[1024];
    long used = 0;
    reply("ready rss=%ld", rss_bytes());
    for (;;) {
        ssize_t n = read(0, line + used, sizeof line - 1 - (size_t)used);
        if (n <= 0) return 0;
        used += n;
        char *nl;
        while ((nl = memchr(line, '\n', (size_t)used))) {
            *nl = 0;
            char arg[1000] = "";
            long a = 0, b = 0;
            if (sscanf(line, "heap %ld", &a) == 1) heap(a);
            else if (strcmp(line, "trim") == 0) trim();
            else if (sscanf(line, "file %999s", arg) == 1) map_file(arg);
            else if (sscanf(line, "anon %ld", &a) == 1) anon(a);
            else if (sscanf(line, "threads %ld %ld", &a, &b) == 2) threads(a, b, 0);
            else if (sscanf(line, "spin %ld %ld", &a, &b) == 2) threads(a, b, 1);
            else if (strcmp(line, "stats") == 0) stats();
            else reply("err unknown command %s", line);
            used -= nl + 1 - line;
            memmove(line, nl + 1, (size_t)used);
        }
    }
}
