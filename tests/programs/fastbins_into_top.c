/* A thread arena where a trim's fastbin consolidation merges a 768 KiB free chunk
   into the top chunk, which malloc_trim(0) then leaves alone. Nothing here calls
   malloc between the frees and the trim (no stdio: its buffers are malloc's). */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long rss_kib(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *line = strstr(buf, "VmRSS:");
    return line ? atol(line + 6) : -1;
}

static void say(const char *text, long value) {
    char out[64];
    int n = 0;
    for (const char *c = text; *c && n < 40; c++) out[n++] = *c;
    char digits[24];
    int d = 0;
    unsigned long v = value < 0 ? (unsigned long)-value : (unsigned long)value;
    do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v && d < 20);
    if (value < 0) out[n++] = '-';
    while (d) out[n++] = digits[--d];
    out[n++] = '\n';
    (void)!write(1, out, (size_t)n);
}

static void *worker(void *arg) {
    (void)arg;
    enum { BIG = 8, SMALL = 32 };
    char *big[BIG], *small[SMALL], *pre[7];
    for (int i = 0; i < 7; i++) pre[i] = malloc(40);          /* to fill the tcache with, later */
    for (int i = 0; i < BIG; i++) { big[i] = malloc(96 << 10); memset(big[i], 1, 96 << 10); }
    for (int i = 0; i < SMALL; i++) small[i] = malloc(40);   /* after the big ones, up to the top chunk */
    for (int i = 0; i < BIG; i++) free(big[i]);               /* one free chunk of 768 KiB, in a bin */
    for (int i = 0; i < 7; i++) free(pre[i]);                 /* the tcache's 7 for this size */
    for (int i = 0; i < SMALL; i++) free(small[i]);           /* so these go to a fastbin */
    say("ready ", 0);
    char cmd[8];
    if (read(0, cmd, sizeof cmd) > 0) {
        long before = rss_kib();
        malloc_trim(0);
        say("released_kib ", before - rss_kib());
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    return 0;
}
