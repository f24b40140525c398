/* A fragmented glibc heap, on command, with glibc's own count of it (mallinfo2) on request.

   One command a line on stdin, one reply a line on stdout:
     frag N MIN MAX KEEP      malloc N blocks of MIN..MAX bytes (sizes from a fixed seed), write them,
                              then free all but every KEEP-th: the free runs lie between live blocks
     threads T N MIN MAX KEEP the same in T threads at once (each gets an arena of its own), which
                              then block, keeping their blocks
     mmapped N SIZE KEEP      malloc N blocks of SIZE bytes (over the mmap threshold: chunks of their
                              own), write them, free all but every KEEP-th
     trim                     malloc_trim(0)
     stats                    mallinfo2's figures and VmRSS
   Replies are "ok key=value ..." in bytes. Nothing here uses stdio: its buffers come from malloc. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void reply(const char *fmt, ...) {
    char out[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof out - 1, fmt, ap);
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
    return line ? atol(line + 6) * 1024L : -1;
}

struct work { long n, min, max, keep; unsigned seed; };

/* The kept blocks are never freed: they are what the program holds. */
static void fragment(struct work *w) {
    char **blocks = malloc((size_t)w->n * sizeof *blocks);
    unsigned seed = w->seed;
    for (long i = 0; i < w->n; i++) {
        size_t size = (size_t)(w->min + rand_r(&seed) % (w->max - w->min + 1));
        blocks[i] = malloc(size);
        memset(blocks[i], 1, size);
    }
    for (long i = 0; i < w->n; i++)
        if (i % w->keep) free(blocks[i]);
    free(blocks);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int done;

static void *worker(void *arg) {
    fragment(arg);
    pthread_mutex_lock(&lock);
    done++;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&lock);
    for (;;) pause();
    return NULL;
}

static void threads(int t, struct work w) {
    static struct work each[64];
    pthread_t tid;
    if (t > 64) t = 64;
    done = 0;
    for (int i = 0; i < t; i++) {
        each[i] = w;
        each[i].seed = (unsigned)i + 7;
        pthread_create(&tid, NULL, worker, &each[i]);
    }
    pthread_mutex_lock(&lock);
    while (done < t) pthread_cond_wait(&done_cond, &lock);
    pthread_mutex_unlock(&lock);
}

int main(void) {
    char line[256];
    size_t have = 0;
    for (;;) {
        ssize_t got = read(0, line + have, sizeof line - 1 - have);
        if (got <= 0) return 0;
        have += (size_t)got;
        line[have] = 0;
        char *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = 0;
            long a = 0, b = 0, c = 0, d = 0, e = 0;
            if (sscanf(line, "frag %ld %ld %ld %ld", &a, &b, &c, &d) == 4 && d > 0 && c >= b) {
                struct work w = {a, b, c, d, 1};
                fragment(&w);
                reply("ok");
            } else if (sscanf(line, "threads %ld %ld %ld %ld %ld", &a, &b, &c, &d, &e) == 5 && e > 0) {
                threads((int)a, (struct work){b, c, d, e, 1});
                reply("ok");
            } else if (sscanf(line, "mmapped %ld %ld %ld", &a, &b, &c) == 3 && c > 0) {
                struct work w = {a, b, b, c, 1};
                fragment(&w);
                reply("ok");
            } else if (strcmp(line, "trim") == 0) {
                reply("ok trimmed=%d", malloc_trim(0));
            } else if (strcmp(line, "stats") == 0) {
                struct mallinfo2 mi = mallinfo2();
                reply("ok uordblks=%zu fordblks=%zu hblkhd=%zu hblks=%zu arena=%zu rss=%ld", mi.uordblks,
                      mi.fordblks, mi.hblkhd, mi.hblks, mi.arena, rss_bytes());
            } else {
                reply("err unknown command");
            }
            size_t used = (size_t)(nl + 1 - line);
            memmove(line, nl + 1, have - used + 1);
            have -= used;
        }
    }
}
