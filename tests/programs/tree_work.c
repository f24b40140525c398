/* A C process tree whose work is done by a child (or a grandchild), knowing nothing of memgap.

     tree_work work [MIB] [REST]   the work here: malloc MIB MiB (200) in 4 KiB blocks, touch
                                   them, go over them for ~0.4 s, free 15 of every 16 (glibc
                                   keeps the pages), rest REST s (1), exit
     tree_work fork ...            fork; the child does the work (no exec); the parent waits
     tree_work exec ...            fork and exec "tree_work work ..."; the parent waits
     tree_work deep ...            fork a child that forks and execs the worker: the work is
                                   in a grandchild; each parent waits
     tree_work many N              fork and exec /bin/true N times, one after the other
     tree_work run CMD ARG...      fork and exec CMD (a benchmark's workload, timed as a tree)

   The worker prints its own figures on stderr as it exits (stdout may be a pipe):
     tree_work pid=PID hwm=BYTES rss=BYTES
   hwm: its VmHWM (the peak of its RSS), rss: its VmRSS then, from /proc/self/status.
   The first process says, as it returns, its time since it started and the CPU time of the tree
   (its own and its waited-for descendants'):
     tree_work root wall=SECONDS cpu=SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4000

static long status_kib(const char *key) {
    char line[256];
    long value = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') value = atol(line + n + 1);
    fclose(f);
    return value;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int work(long mib, double rest) {
    long n = mib * 1024 * 1024 / BLOCK;
    char **blocks = malloc(n * sizeof *blocks);
    if (!blocks) return 1;
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc(BLOCK);
        if (!blocks[i]) return 1;
        memset(blocks[i], (int)(i & 0x7f) + 1, BLOCK);
    }
    volatile unsigned long sum = 0; /* the work over what it built: RSS steady, CPU busy */
    for (double until = now() + 0.4; now() < until;)
        for (long i = 0; i < n; i += 97) sum += (unsigned char)blocks[i][i % BLOCK];
    for (long i = 0; i < n; i++)
        if (i % 16) free(blocks[i]);
    usleep((useconds_t)(rest * 1e6));
    fprintf(stderr, "tree_work pid=%d hwm=%ld rss=%ld\n", (int)getpid(), status_kib("VmHWM") * 1024,
            status_kib("VmRSS") * 1024);
    return 0;
}

static int wait_for(pid_t child) {
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int spawn_worker(char **argv, int argc) {
    char *args[5] = {argv[0], "work", argc > 2 ? argv[2] : "200", argc > 3 ? argv[3] : "1", NULL};
    pid_t child = fork();
    if (child == 0) {
        execv("/proc/self/exe", args);
        _exit(127);
    }
    return wait_for(child);
}

static int many(long n) {
    for (long i = 0; i < n; i++) {
        pid_t child = fork();
        if (child == 0) {
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        if (wait_for(child) != 0) return 1;
    }
    return 0;
}

static int tree(const char *mode, char **argv, int argc) {
    long mib = argc > 2 ? atol(argv[2]) : 200;
    double rest = argc > 3 ? atof(argv[3]) : 1.0;
    if (strcmp(mode, "exec") == 0) return spawn_worker(argv, argc);
    if (strcmp(mode, "many") == 0) return many(argc > 2 ? atol(argv[2]) : 100);
    if (strcmp(mode, "run") == 0 && argc > 2) {
        pid_t child = fork();
        if (child == 0) {
            execvp(argv[2], argv + 2);
            _exit(127);
        }
        return wait_for(child);
    }
    if (strcmp(mode, "fork") == 0) {
        pid_t child = fork();
        if (child == 0) exit(work(mib, rest)); /* exit(), not _exit(): its atexit work runs as a program's does */
        return wait_for(child);
    }
    if (strcmp(mode, "deep") == 0) {
        pid_t child = fork();
        if (child == 0) exit(spawn_worker(argv, argc));
        return wait_for(child);
    }
    fprintf(stderr, "usage: tree_work work|fork|exec|deep [MIB] [REST] | many N\n");
    return 2;
}

static double cpu_of(int who) {
    struct rusage ru;
    getrusage(who, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fork";
    if (strcmp(mode, "work") == 0) return work(argc > 2 ? atol(argv[2]) : 200, argc > 3 ? atof(argv[3]) : 1.0);
    double started = now();
    int code = tree(mode, argv, argc);
    fprintf(stderr, "tree_work root wall=%.4f cpu=%.4f\n", now() - started,
            cpu_of(RUSAGE_SELF) + cpu_of(RUSAGE_CHILDREN));
    return code;
}
