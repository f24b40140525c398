/* A program that knows nothing of memgap and holds shared memory, the way a database server
   does (PostgreSQL's shared buffers are an anonymous MAP_SHARED mapping, its dynamic shared
   memory POSIX shm, older versions' a SysV segment).

     shared_mem tree ANON_MIB POSIX_MIB SYSV_MIB MEMFD_MIB
         maps ANON_MIB of MAP_SHARED|MAP_ANONYMOUS memory, POSIX_MIB of a shm_open()ed object,
         a SysV segment (shmget) of SYSV_MIB and a memfd of MEMFD_MIB (a size of 0 leaves one
         out), writes every page, then forks 3 children that read every page of each; prints
         "pids P C1 C2 C3", then "ready" once every child has read its pages.
     shared_mem retain SHARED_MIB FREE_MIB
         one process: writes SHARED_MIB of MAP_SHARED|MAP_ANONYMOUS memory, and leaves FREE_MIB
         of glibc's main heap free but untrimmed (blocks of 64 KiB..1 MiB below the mmap
         threshold, most of them freed, one live block above them pinning the top chunk);
         prints "freed=BYTES kept=BYTES", then "ready"; then, for each line "trim" it reads,
         malloc_trim(0) and "released=BYTES" (its VmRSS before less after).
   Then both rest until stdin closes; the parent kills its children and removes what it named. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024L * 1024L)
#define PAGE 4096L

struct shared { char *at; long size; };

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

static void touch(char *p, long size) {
    for (long i = 0; i < size; i += PAGE) p[i] = (char)(i / PAGE);
}

static long read_all(const struct shared *s, int n) {
    long sum = 0;
    for (int k = 0; k < n; k++)
        for (long i = 0; i < s[k].size; i += PAGE) sum += ((volatile char *)s[k].at)[i];
    return sum;
}

static char *map_fd(int fd, long size) {
    if (ftruncate(fd, size) != 0) return MAP_FAILED;
    char *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p;
}

static int tree(long anon, long posix, long sysv, long memfd) {
    struct shared s[4];
    int n = 0, shmid = -1;
    char name[64];
    snprintf(name, sizeof name, "/memgap-test-%d", (int)getpid());
    if (anon) s[n++] = (struct shared){mmap(NULL, (size_t)anon, PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_ANONYMOUS, -1, 0), anon};
    if (posix) s[n++] = (struct shared){map_fd(shm_open(name, O_CREAT | O_RDWR | O_EXCL, 0600), posix), posix};
    if (sysv) {
        shmid = shmget(IPC_PRIVATE, (size_t)sysv, IPC_CREAT | 0600);
        s[n++] = (struct shared){shmid < 0 ? MAP_FAILED : shmat(shmid, NULL, 0), sysv};
        if (shmid >= 0) shmctl(shmid, IPC_RMID, NULL);  /* gone once the last process detaches */
    }
    if (memfd) s[n++] = (struct shared){map_fd(memfd_create("memgap-test", 0), memfd), memfd};
    for (int k = 0; k < n; k++) {
        if (s[k].at == MAP_FAILED || s[k].at == (char *)-1) { perror("map"); shm_unlink(name); return 1; }
        touch(s[k].at, s[k].size);
    }
    int ready[2];
    if (pipe(ready) != 0) return 1;
    pid_t kids[3];
    for (int c = 0; c < 3; c++) {
        kids[c] = fork();
        if (kids[c] == 0) {
            close(ready[0]);
            long sum = read_all(s, n);
            (void)!write(ready[1], &sum, sizeof sum);
            for (;;) pause();
        }
    }
    close(ready[1]);
    long sum;
    for (int c = 0; c < 3; c++) (void)!read(ready[0], &sum, sizeof sum);
    printf("pids %d %d %d %d\nready\n", (int)getpid(), (int)kids[0], (int)kids[1], (int)kids[2]);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {}
    for (int c = 0; c < 3; c++) { kill(kids[c], SIGKILL); waitpid(kids[c], NULL, 0); }
    if (posix) shm_unlink(name);
    return 0;
}

static int retain(long shared, long free_bytes) {
    /* every block below in the main heap, none given back by free() */
    mallopt(M_MMAP_THRESHOLD, 32 * (int)MIB);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    char *p = mmap(NULL, (size_t)shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    touch(p, shared);
    enum { MAX = 4096 };
    static char *blocks[MAX];
    long held = 0, freed = 0, kept = 0, n = 0;
    /* sizes from 64 KiB to 1 MiB, in a fixed sequence; one block in 8 stays (a little live data
       among the free chunks, as a backend's caches leave), the rest are freed */
    while (n < MAX && freed < free_bytes) {
        long size = (64 << 10) << (n % 5);
        blocks[n] = malloc((size_t)size);
        if (blocks[n] == NULL) return 1;
        memset(blocks[n], 0x5a, (size_t)size);
        held += size;
        if (n % 8 == 7) kept += size;
        else freed += size;
        n++;
    }
    char *pin = malloc(4096);  /* above them all: the top chunk cannot shrink over the freed blocks */
    memset(pin, 0x5a, 4096);
    for (long i = 0; i < n; i++)
        if (i % 8 != 7) free(blocks[i]);
    printf("freed=%ld kept=%ld\nready\n", freed, kept);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (strcmp(line, "trim\n") != 0) continue;
        long before = rss_bytes();
        malloc_trim(0);
        printf("released=%ld\n", before - rss_bytes());
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "tree") == 0)
        return tree(atol(argv[2]) * MIB, atol(argv[3]) * MIB, atol(argv[4]) * MIB, atol(argv[5]) * MIB);
    if (argc == 4 && strcmp(argv[1], "retain") == 0)
        return retain(atol(argv[2]) * MIB, atol(argv[3]) * MIB);
    fprintf(stderr, "usage: shared_mem tree ANON POSIX SYSV MEMFD | retain SHARED FREE (MiB)\n");
    return 2;
}
