/*
 * memgap's native agent: LD_PRELOAD it into any process to let memgap read the
 * allocator's own statistics and ask for a trim, and (when asked through the
 * environment) to run the idle trimmer, without changing the program.
 *
 * Environment:
 *   MEMGAP_AGENT        off: do nothing; auto: do nothing in a Python interpreter
 *                       (memgap's Python bootstrap covers those); anything else: on.
 *   MEMGAP_AGENT_DIR    folder of the control socket (default: MEMGAP_RECORD_DIR,
 *                       else, or when the path would not fit in a socket address,
 *                       /tmp/memgap-agent-UID, created mode 0700).
 *   MEMGAP_RECORD_DIR   also: at exit, the final statistics go to agent-PID.txt there, with
 *                       the trimmers' trims ("trimmed" lines: span, thread CPU, RSS before and after).
 *   MEMGAP_EXIT_SOCKET  a socket of memgap run's recorder: at exit, the agent says "exit" there
 *                       and waits (EXIT_HOLD_MS at most) for the recorder to read the process
 *                       from outside, so its last snapshot is taken as it exits.
 *   MEMGAP_TRIMMER=1    trim when the process has gone quiet after a burst (glibc).
 *   MEMGAP_TRIM_EVERY=S trim every S seconds (glibc).
 *
 * Control channel: a Unix socket DIR/agent-PID.sock, mode 0600, peers checked
 * with SO_PEERCRED (same user or root). A client sends one line, "stats" or
 * "trim", and reads the reply until the agent closes the connection.
 *
 * Why the care about malloc: the agent's own threads never call malloc, so
 * glibc never gives them an arena and the process's arena layout stays the
 * program's. Replies are formatted into a stream over a fixed buffer whose
 * FILE was made by the loading thread, and everything else uses syscalls.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define AGENT_VERSION 1
#define REPLY_BYTES (8u << 20) /* 8 MiB of address space; only what a reply touches is resident */
#define MiB (1024.0 * 1024.0)
#define EXIT_HOLD_MS 1000 /* the longest an exit waits for the recorder */

enum allocator { ALLOC_GLIBC, ALLOC_JEMALLOC, ALLOC_TCMALLOC, ALLOC_MIMALLOC, ALLOC_OTHER };
static const char *allocator_names[] = {"glibc", "jemalloc", "tcmalloc", "mimalloc", "other"};

static enum allocator allocator = ALLOC_OTHER;
static char malloc_from[512];
static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char record_dir[4096];
static char exit_socket[sizeof(((struct sockaddr_un *)0)->sun_path)];
/* The exit's hold: how long it waited, whether the recorder answered, when the process went on to exit. */
static struct {
    int tried, answered;
    double held, at;
} exit_hold;
static pid_t owner_pid;
static char *reply_buf;
static FILE *reply;
static char reply_stdio_buf[8192]; /* given to setvbuf: stdio would malloc its own on first use */
static pthread_mutex_t reply_lock = PTHREAD_MUTEX_INITIALIZER;

/* What the trimmers did, for the stats reply and the exit record. */
static struct {
    const char *mode; /* "off", "idle" or "every" */
    double every;
    unsigned long trims, checks;
    long long released; /* bytes of RSS the trims gave back (VmRSS before minus after) */
    double seconds;     /* time spent inside malloc_trim */
} trimmer = {"off", 0, 0, 0, 0, 0};

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef int (*tc_property_fn)(const char *, size_t *);
typedef void (*tc_release_fn)(void);
typedef void (*mi_collect_fn)(int);

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* VmRSS in bytes from /proc/self/statm, with read(2): no stdio, no malloc. */
static long long rss_bytes(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = strchr(buf, ' ');
    if (!p) return -1;
    return strtoll(p + 1, NULL, 10) * sysconf(_SC_PAGESIZE);
}

static void detect_allocator(void) {
    Dl_info info;
    void *fn = dlsym(RTLD_DEFAULT, "malloc");
    if (fn && dladdr(fn, &info) && info.dli_fname) snprintf(malloc_from, sizeof malloc_from, "%s", info.dli_fname);
    const char *lib = strrchr(malloc_from, '/');
    lib = lib ? lib + 1 : malloc_from;
    if (strstr(lib, "jemalloc") || dlsym(RTLD_DEFAULT, "mallctl")) {
        if (strstr(lib, "jemalloc") || !strstr(lib, "libc.so")) allocator = ALLOC_JEMALLOC;
    }
    if (allocator == ALLOC_OTHER) {
        if (strstr(lib, "tcmalloc")) allocator = ALLOC_TCMALLOC;
        else if (strstr(lib, "mimalloc")) allocator = ALLOC_MIMALLOC;
        else if (strncmp(lib, "libc.so", 7) == 0 || strncmp(lib, "libc-", 5) == 0) allocator = ALLOC_GLIBC;
    }
}

/* One trim with the allocator's own call; returns the RSS it gave back (*before: VmRSS before it). */
static long long trim_now(double *seconds, long long *before_out) {
    long long before = rss_bytes();
    if (before_out) *before_out = before;
    double started = now_seconds();
    if (allocator == ALLOC_GLIBC) {
        malloc_trim(0);
    } else if (allocator == ALLOC_JEMALLOC) {
        mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
        if (mallctl) mallctl("arena.4096.purge", NULL, NULL, NULL, 0); /* 4096: MALLCTL_ARENAS_ALL */
    } else if (allocator == ALLOC_TCMALLOC) {
        tc_release_fn release = (tc_release_fn)dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory");
        if (release) release();
    } else if (allocator == ALLOC_MIMALLOC) {
        mi_collect_fn collect = (mi_collect_fn)dlsym(RTLD_DEFAULT, "mi_collect");
        if (collect) collect(1);
    }
    *seconds = now_seconds() - started;
    long long after = rss_bytes();
    return before >= 0 && after >= 0 ? before - after : 0;
}

/* The trimmers' trims, each with its span (the wall clock) and its thread's CPU, for the exit record:
   the lab tells memgap's own CPU from the workload's bursts by them (memgap.lab.work). The last
   TRIM_SPANS are kept; a slot is filled before the count that shows it is raised. */
#define TRIM_SPANS 256
static struct {
    double started, ended, cpu;
    long long before, after;
} trim_spans[TRIM_SPANS];
static unsigned long trim_spans_n;

static double clock_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A trimmer's trim, timed and kept in trim_spans; returns the RSS it gave back. */
static long long trimmer_trim(double *seconds) {
    double started = clock_seconds(CLOCK_REALTIME), cpu = clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    long long before;
    long long released = trim_now(seconds, &before);
    unsigned long n = __atomic_load_n(&trim_spans_n, __ATOMIC_RELAXED);
    trim_spans[n % TRIM_SPANS].started = started;
    trim_spans[n % TRIM_SPANS].ended = clock_seconds(CLOCK_REALTIME);
    trim_spans[n % TRIM_SPANS].cpu = clock_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu;
    trim_spans[n % TRIM_SPANS].before = before;
    trim_spans[n % TRIM_SPANS].after = before - released;
    __atomic_store_n(&trim_spans_n, n + 1, __ATOMIC_RELEASE);
    return released;
}

/* The exit record's own lines: the hold, when the process went on to exit, its trimmers' trims, and
   its command line (hex, its arguments NUL-separated: the recorder's name for a process it never read). */
static void write_exit(FILE *out) {
    fprintf(out, "exit time=%.6f held=%.6f answered=%d tried=%d\n", exit_hold.at, exit_hold.held,
            exit_hold.answered, exit_hold.tried);
    unsigned long kept = __atomic_load_n(&trim_spans_n, __ATOMIC_ACQUIRE);
    for (unsigned long k = kept > TRIM_SPANS ? kept - TRIM_SPANS : 0; k < kept; k++)
        fprintf(out, "trimmed time=%.6f started=%.6f cpu=%.6f rss_before=%lld rss_after=%lld\n",
                trim_spans[k % TRIM_SPANS].ended, trim_spans[k % TRIM_SPANS].started, trim_spans[k % TRIM_SPANS].cpu,
                trim_spans[k % TRIM_SPANS].before, trim_spans[k % TRIM_SPANS].after);
    unsigned char raw[2048];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, raw, sizeof raw) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) return;
    fputs("cmdline ", out);
    for (ssize_t i = 0; i < n; i++) fprintf(out, "%02x", raw[i]);
    fputc('\n', out);
}

/* The statistics reply, formatted into `out` (the caller holds reply_lock). */
static void write_stats(FILE *out) {
    fprintf(out, "memgap-agent %d\npid %d\nallocator %s\nmalloc_from %s\nrss %lld\n", AGENT_VERSION,
            (int)getpid(), allocator_names[allocator], malloc_from, rss_bytes());
    fprintf(out, "trimmer %s every=%.3f trims=%lu checks=%lu released=%lld seconds=%.6f\n", trimmer.mode,
            trimmer.every, trimmer.trims, trimmer.checks, trimmer.released, trimmer.seconds);
    if (allocator == ALLOC_GLIBC) {
        struct mallinfo2 mi = mallinfo2();
        fprintf(out,
                "mallinfo2 arena=%zu ordblks=%zu smblks=%zu hblks=%zu hblkhd=%zu usmblks=%zu fsmblks=%zu "
                "uordblks=%zu fordblks=%zu keepcost=%zu\n",
                mi.arena, mi.ordblks, mi.smblks, mi.hblks, mi.hblkhd, mi.usmblks, mi.fsmblks, mi.uordblks,
                mi.fordblks, mi.keepcost);
        fputs("malloc_info\n", out);
        malloc_info(0, out);
    } else if (allocator == ALLOC_JEMALLOC) {
        mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
        if (mallctl) {
            uint64_t epoch = 1;
            size_t len = sizeof epoch;
            mallctl("epoch", &epoch, &len, &epoch, len);
            static const char *names[] = {"allocated", "active", "resident", "retained", "mapped", "metadata"};
            fputs("jemalloc", out);
            for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
                char key[64];
                size_t value = 0;
                len = sizeof value;
                snprintf(key, sizeof key, "stats.%s", names[i]);
                if (mallctl(key, &value, &len, NULL, 0) == 0) fprintf(out, " %s=%zu", names[i], value);
            }
            /* muzzy pages (MADV_FREE'd) stay resident until the kernel reclaims them, yet stats.resident
               leaves them out: memgap adds them to its bound on jemalloc's free pages */
            size_t pmuzzy = 0, page = 0, plen = sizeof pmuzzy;
            len = sizeof page;
            if (mallctl("stats.arenas.4096.pmuzzy", &pmuzzy, &plen, NULL, 0) == 0 &&  /* 4096: all arenas */
                mallctl("arenas.page", &page, &len, NULL, 0) == 0)
                fprintf(out, " muzzy=%zu", pmuzzy * page);
            unsigned narenas = 0;
            len = sizeof narenas;
            if (mallctl("arenas.narenas", &narenas, &len, NULL, 0) == 0) fprintf(out, " narenas=%u", narenas);
            fputc('\n', out);
        }
    } else if (allocator == ALLOC_TCMALLOC) {
        tc_property_fn prop = (tc_property_fn)dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
        if (prop) {
            static const char *names[] = {"generic.current_allocated_bytes", "generic.heap_size",
                                          "generic.total_physical_bytes", "tcmalloc.pageheap_free_bytes",
                                          "tcmalloc.pageheap_unmapped_bytes"};
            fputs("tcmalloc", out);
            for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
                size_t value = 0;
                if (prop(names[i], &value)) fprintf(out, " %s=%zu", names[i], value);
            }
            fputc('\n', out);
        }
    }
    if (exit_hold.at > 0) write_exit(out);
    fputs("end\n", out);
}

/* Send what `fill` formats to fd (a socket, or the exit record's file). */
static void send_reply(int fd, void (*fill)(FILE *)) {
    pthread_mutex_lock(&reply_lock);
    rewind(reply);
    fill(reply);
    fflush(reply);
    long length = ftell(reply);
    if (length > 0 && length >= (long)REPLY_BYTES - 1) length = REPLY_BYTES - 1; /* truncated: parser says so */
    for (long sent = 0; sent < length;) {
        ssize_t n = send(fd, reply_buf + sent, length - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK) n = write(fd, reply_buf + sent, length - sent);
        if (n <= 0) break;
        sent += n;
    }
    /* Give the pages back: the agent's replies must not show up in the RSS it reports on. */
    long page = sysconf(_SC_PAGESIZE);
    if (length > 0) madvise(reply_buf, ((length + page - 1) / page) * page, MADV_DONTNEED);
    pthread_mutex_unlock(&reply_lock);
}

static double last_trim_seconds;
static long long last_trim_released;
static long long last_trim_before;

static void write_trim(FILE *out) {
    fprintf(out, "memgap-agent %d\npid %d\nallocator %s\ntrim released=%lld seconds=%.6f rss_before=%lld rss_after=%lld\nend\n",
            AGENT_VERSION, (int)getpid(), allocator_names[allocator], last_trim_released, last_trim_seconds,
            last_trim_before, last_trim_before - last_trim_released);
}

static void serve(int conn) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != 0 && cred.uid != getuid()))
        return; /* not our user: say nothing */
    struct timeval tv = {2, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char line[64];
    ssize_t n = recv(conn, line, sizeof line - 1, 0);
    if (n <= 0) return;
    line[n] = 0;
    if (strncmp(line, "stats", 5) == 0) {
        send_reply(conn, write_stats);
    } else if (strncmp(line, "trim", 4) == 0) {
        last_trim_before = rss_bytes();
        last_trim_released = trim_now(&last_trim_seconds, NULL);
        send_reply(conn, write_trim);
    } else {
        send(conn, "error unknown command\n", 22, MSG_NOSIGNAL);
    }
}

static void *listen_loop(void *arg) {
    int listener = (int)(intptr_t)arg;
    for (;;) {
        int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return NULL; /* the program closed our socket: stop serving */
        }
        serve(conn);
        close(conn);
    }
}

/* The idle trimmer: the same rule as memgap.Trimmer (remedies.py). */
static void *idle_trimmer(void *arg) {
    (void)arg;
    const double quiet = 2.0, quiet_change = 0.02, min_gap = 10.0;
    const size_t min_free = 16u << 20;
    double quiet_since = now_seconds(), next_allowed = 0, gap = min_gap;
    long long last_in_use = -1;
    int burst_since_trim = 1;
    for (;;) {
        struct timespec pause = {1, 0};
        nanosleep(&pause, NULL);
        struct mallinfo2 mi = mallinfo2();
        trimmer.checks++;
        double now = now_seconds();
        long long in_use = (long long)(mi.uordblks + mi.hblkhd);
        double scale = last_in_use > (1 << 20) ? (double)last_in_use : (double)(1 << 20);
        if (last_in_use < 0 || llabs(in_use - last_in_use) > quiet_change * scale) {
            quiet_since = now;
            burst_since_trim = 1;
        }
        last_in_use = in_use;
        /* glibc keeps counting given-back pages as free, so only a new burst makes a trim due. */
        if (!burst_since_trim || now - quiet_since < quiet || now < next_allowed || mi.fordblks < min_free)
            continue;
        double seconds;
        long long released = trimmer_trim(&seconds);
        trimmer.trims++;
        trimmer.seconds += seconds;
        trimmer.released += released > 0 ? released : 0;
        burst_since_trim = 0;
        gap = released >= (1 << 20) ? min_gap : (gap * 2 < min_gap * 64 ? gap * 2 : min_gap * 64);
        next_allowed = now + gap;
    }
    return NULL;
}

static void *periodic_trimmer(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec pause = {(time_t)trimmer.every, (long)((trimmer.every - (time_t)trimmer.every) * 1e9)};
        nanosleep(&pause, NULL);
        double seconds;
        long long released = trimmer_trim(&seconds);
        trimmer.trims++;
        trimmer.checks++;
        trimmer.seconds += seconds;
        trimmer.released += released > 0 ? released : 0;
    }
    return NULL;
}

/* A thread with a small stack and every signal blocked: the program's handlers never run on it. */
static int start_thread(void *(*fn)(void *), void *arg) {
    pthread_t thread;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

static int in_python(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    return strncmp(base ? base + 1 : exe, "python", 6) == 0;
}

/* The private default folder, /tmp/memgap-agent-UID, made mode 0700 and checked to be ours. */
static int private_dir(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/memgap-agent-%u", (unsigned)getuid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
    struct stat st;
    /* Never use a folder someone else made for us. */
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) return -1;
    return 0;
}

/* Sockets left by agents whose processes died without exiting (SIGKILL): removed, so the folder does not fill. */
static void remove_stale_sockets(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        int pid;
        char tail[8];
        if (sscanf(entry->d_name, "agent-%d.so%7s", &pid, tail) == 2 && strcmp(tail, "ck") == 0 && pid > 0 &&
            kill(pid, 0) != 0 && errno == ESRCH) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Where this process's socket goes (as memgap.agent.client.socket_path computes it). */
static int choose_socket_path(void) {
    char dir[4096];
    const char *configured = getenv("MEMGAP_AGENT_DIR");
    if (!configured || !*configured) configured = getenv("MEMGAP_RECORD_DIR");
    int n = -1;
    if (configured && *configured)
        n = snprintf(socket_path, sizeof socket_path, "%s/agent-%d.sock", configured, (int)getpid());
    if (n < 0 || n >= (int)sizeof socket_path) { /* none given, or too long for a socket address */
        if (private_dir(dir, sizeof dir) != 0) return -1;
        remove_stale_sockets(dir);
        n = snprintf(socket_path, sizeof socket_path, "%s/agent-%d.sock", dir, (int)getpid());
        if (n < 0 || n >= (int)sizeof socket_path) return -1;
    }
    return 0;
}

static int open_listener(void) {
    if (choose_socket_path() != 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, socket_path, sizeof addr.sun_path);
    unlink(socket_path); /* a socket left by an earlier process with this PID */
    /* Connecting needs listen(), which comes only after the mode is 0600. */
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(socket_path, 0600) != 0 ||
        listen(fd, 8) != 0) {
        close(fd);
        socket_path[0] = 0;
        return -1;
    }
    /* Far from the low numbers programs use and sometimes close in bulk. */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 512);
    if (high >= 0) {
        close(fd);
        fd = high;
    }
    return fd;
}

static void start_listener(void) {
    owner_pid = getpid();
    int fd = open_listener();
    if (fd >= 0 && start_thread(listen_loop, (void *)(intptr_t)fd) != 0) {
        close(fd);
        unlink(socket_path);
        socket_path[0] = 0;
    }
}

static void start_trimmers(void) {
    if (allocator != ALLOC_GLIBC) return; /* the trimmers use malloc_trim */
    const char *every = getenv("MEMGAP_TRIM_EVERY");
    const char *idle = getenv("MEMGAP_TRIMMER");
    if (every && atof(every) > 0) {
        trimmer.mode = "every";
        trimmer.every = atof(every);
        start_thread(periodic_trimmer, NULL);
    } else if (idle && strcmp(idle, "1") == 0) {
        trimmer.mode = "idle";
        start_thread(idle_trimmer, NULL);
    }
}

/* A forked child has none of the parent's threads: start its own. */
static void after_fork_in_child(void) {
    /* The parent's agent thread may have held these at the fork: the child gets fresh ones. */
    pthread_mutex_init(&reply_lock, NULL);
    FILE *fresh = fmemopen(reply_buf, REPLY_BYTES, "w");
    if (fresh && setvbuf(fresh, reply_stdio_buf, _IOFBF, sizeof reply_stdio_buf) == 0) reply = fresh;
    trimmer.trims = trimmer.checks = 0;
    trimmer.released = 0;
    trimmer.seconds = 0;
    trimmer.mode = "off";
    trim_spans_n = 0; /* the parent's trims are its own */
    start_listener();
    start_trimmers();
}

static int active;

__attribute__((constructor)) static void agent_start(void) {
    const char *mode = getenv("MEMGAP_AGENT");
    if (mode && strcmp(mode, "off") == 0) return;
    if (mode && strcmp(mode, "auto") == 0 && in_python()) {
        /* Dormant. A program this process was before exec() may have left its socket: remove it. */
        if (choose_socket_path() == 0) unlink(socket_path);
        socket_path[0] = 0;
        return;
    }
    /* No MAP_NORESERVE: memgap tells jemalloc's mappings by that flag (VmFlags "nr" in smaps) */
    reply_buf = mmap(NULL, REPLY_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reply_buf == MAP_FAILED) return;
    reply = fmemopen(reply_buf, REPLY_BYTES, "w");
    if (!reply || setvbuf(reply, reply_stdio_buf, _IOFBF, sizeof reply_stdio_buf) != 0) return;
    const char *dir = getenv("MEMGAP_RECORD_DIR");
    if (dir) snprintf(record_dir, sizeof record_dir, "%s", dir);
    const char *exit_at = getenv("MEMGAP_EXIT_SOCKET"); /* kept now: a program may clear its environment */
    if (exit_at && strlen(exit_at) < sizeof exit_socket) memcpy(exit_socket, exit_at, strlen(exit_at) + 1);
    detect_allocator();
    active = 1;
    start_listener();
    start_trimmers();
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Under memgap run: "exit" to the recorder, then wait for its "ok" (it has read the process from
   outside meanwhile), EXIT_HOLD_MS at most all told. Never blocks longer: a recorder that is gone,
   busy or slow costs the exit that wait and no more. */
static void hold_exit(void) {
    if (!exit_socket[0]) return;
    exit_hold.tried = 1;
    double started = now_seconds();
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, exit_socket, sizeof addr.sun_path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 && send(fd, "exit\n", 5, MSG_NOSIGNAL) == 5) {
        char answer[8];
        for (;;) {
            int left = EXIT_HOLD_MS - (int)((now_seconds() - started) * 1000);
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (left <= 0) break;
            int ready = poll(&p, 1, left);
            if (ready < 0 && errno == EINTR) continue;
            if (ready > 0 && recv(fd, answer, sizeof answer, 0) >= 2 && strncmp(answer, "ok", 2) == 0)
                exit_hold.answered = 1;
            break;
        }
    }
    close(fd);
    exit_hold.held = now_seconds() - started;
}

/* At exit: held for the recorder's last read (under memgap run), the final statistics into the
   recording, and the socket removed. */
__attribute__((destructor)) static void agent_stop(void) {
    if (!active || getpid() != owner_pid) return;
    hold_exit();
    exit_hold.at = wall_seconds();
    if (record_dir[0]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/agent-%d.txt", record_dir, (int)getpid());
        /* A new file only: never one that is there, nor where a link planted in the folder points. */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            send_reply(fd, write_stats);
            close(fd);
        }
    }
    if (socket_path[0]) unlink(socket_path);
}
