/* Seed 004 without Python: a pool of blocking threads handling large payloads.
 *
 * Environment: CONCURRENCY (threads, 8), PAYLOAD_KIB (request size, 200),
 * REQUESTS (total, 2000). Each request allocates its payload and a parsed copy
 * in pieces (as a JSON or protobuf decoder would), touches them, and frees
 * them, and keeps a small response among the recent ones. Prints "phase: started", "phase: served" and "phase: idle", then
 * waits like a server until it is stopped (SIGTERM or SIGINT), or exits at
 * once with EXIT_AT_IDLE=1.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long payload_bytes, requests;
static long next_request;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long checksum;
/* Recent responses, kept after their request is done (a cache, a log ring): small
 * long-lived blocks between the big short-lived ones, as in a real server. */
#define RECENT 4096
static char *recent[RECENT];

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    return v && *v ? atol(v) : fallback;
}

static void handle(long id) {
    char *payload = malloc(payload_bytes);
    if (!payload) return;
    memset(payload, (int)(id & 0xff), payload_bytes);
    /* the parsed form: four times the payload in smaller pieces, freed in another order */
    long pieces = 4 * payload_bytes / 4096 + 1;
    char **parts = malloc(pieces * sizeof *parts);
    for (long i = 0; i < pieces; i++) {
        long size = 512 + (i * 1103515245 + id) % 7680;
        parts[i] = malloc(size);
        if (parts[i]) { memset(parts[i], 1, size); checksum += (unsigned char)parts[i][size - 1]; }
    }
    char *response = malloc(256);
    if (response) {
        memset(response, 2, 256);
        pthread_mutex_lock(&lock);
        char *old = recent[id % RECENT];
        recent[id % RECENT] = response;
        pthread_mutex_unlock(&lock);
        free(old);
    }
    free(payload);
    for (long i = pieces - 1; i >= 0; i -= 2) free(parts[i]);
    for (long i = pieces - 2; i >= 0; i -= 2) free(parts[i]);
    free(parts);
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        long id = next_request < requests ? next_request++ : -1;
        pthread_mutex_unlock(&lock);
        if (id < 0) return NULL;
        handle(id);
    }
}

int main(void) {
    long threads = env_long("CONCURRENCY", 8);
    payload_bytes = env_long("PAYLOAD_KIB", 200) * 1024;
    requests = env_long("REQUESTS", 2000);
    if (threads < 1 || threads > 4096 || payload_bytes < 1 || requests < 0) {
        fprintf(stderr, "blockingpool: CONCURRENCY 1..4096, PAYLOAD_KIB >= 1, REQUESTS >= 0\n");
        return 2;
    }
    printf("phase: started\n");
    fflush(stdout);
    pthread_t *pool = calloc(threads, sizeof *pool);
    for (long i = 0; i < threads; i++) pthread_create(&pool[i], NULL, worker, NULL);
    for (long i = 0; i < threads; i++) pthread_join(pool[i], NULL);
    free(pool);
    printf("phase: served\n");
    printf("phase: idle\n");
    fflush(stdout);
    if (env_long("EXIT_AT_IDLE", 0)) return 0;
    for (;;) pause();
}
