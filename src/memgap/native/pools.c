/*
 * Give back the pages of pymalloc's empty pools, in this (Python) process.
 *
 * pymalloc returns memory to the system only a whole arena (1 MiB) at a time.
 * A pool (16 KiB) whose blocks were all freed goes to its arena's list of free
 * pools and keeps its pages resident, dirtied by the blocks it held, for as
 * long as any other pool of the arena is in use. This releases those pages.
 *
 * It must be called with the GIL held for the whole call (ctypes.PyDLL): no
 * thread may allocate from or free into a pool meanwhile. It reads
 * /proc/self/maps itself, within that call, and for each pool position of each
 * private anonymous mapping reads the header with process_vm_readv (a range
 * that another thread unmapped meanwhile reads as an error, never a fault); it
 * acts only on a pool
 * whose header satisfies pymalloc's exact invariants, holds no block
 * (count 0), and shares its arena index with another valid pool of its arena
 * that is in use, or with at least WHOLE_ARENA_MIN empty ones: the wholly
 * empty arena that pymalloc (3.9+) keeps for reuse instead of unmapping it.
 * (The Python side first checks that arenas come from pymalloc's own
 * mmap/munmap allocator, so no freed arena's stale headers stay mapped.)
 * Such a pool is marked as never used (szidx = DUMMY_SIZE_IDX, what pymalloc
 * writes in a pool it carves for the first time), so its next user
 * initialises it from scratch instead of following the free list that lived
 * in its blocks; then every page after the header is dropped with
 * MADV_DONTNEED and comes back zero-filled when touched again.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define ALIGNMENT 16
#define POOL_OVERHEAD 48
#define DUMMY_SIZE_IDX 0xffff
/* Empty pools with one arena index that confirm an arena none of whose pools is in use. */
#define WHOLE_ARENA_MIN 8

struct pool_header {
    uint32_t count; /* a union with a pointer in CPython: the low half on little-endian */
    uint32_t count_pad;
    uint64_t freeblock, nextpool, prevpool;
    uint32_t arenaindex, szidx, nextoffset, maxnextoffset;
};

static int read_header(uintptr_t address, struct pool_header *out) {
    struct iovec local = {out, sizeof *out}, remote = {(void *)address, sizeof *out};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof *out ? 0 : -1;
}

/* pymalloc's invariants for a pool that has been initialised for a size class. */
static int valid(const struct pool_header *h, size_t pool_size) {
    if (h->szidx >= 64) return 0;
    size_t size = (h->szidx + 1) * ALIGNMENT;
    if (h->maxnextoffset != pool_size - size) return 0;
    if (h->nextoffset < POOL_OVERHEAD + 2 * size || h->nextoffset > pool_size) return 0;
    if ((h->nextoffset - POOL_OVERHEAD) % size != 0) return 0;
    return h->count <= (pool_size - POOL_OVERHEAD) / size;
}

static size_t resident_bytes(uintptr_t start, size_t length, size_t page) {
    unsigned char vec[256];
    size_t pages = length / page, total = 0;
    if (pages > sizeof vec || mincore((void *)start, length, vec) != 0) return 0;
    for (size_t i = 0; i < pages; i++) total += (vec[i] & 1) ? page : 0;
    return total;
}

/* One pool position's header, as read. */
struct seen {
    uintptr_t address;
    uint32_t index;
    uint32_t count;
    int valid;
};

/* Whether pools[i] lies in a live arena: a valid pool with the same arena index,
   no farther than an arena's length and with no pool of another arena between,
   is in use; or WHOLE_ARENA_MIN of them (itself included) are empty. */
static int arena_confirmed(const struct seen *pools, size_t n, size_t i, size_t arena_pools) {
    size_t same = 1;
    for (int dir = -1; dir <= 1; dir += 2) {
        for (size_t step = 1; step < arena_pools; step++) {
            if ((dir < 0 && step > i) || (dir > 0 && i + step >= n)) break;
            const struct seen *other = &pools[dir < 0 ? i - step : i + step];
            if (!other->valid) continue;
            if (other->index != pools[i].index) break;
            if (other->count > 0) return 1;
            same++;
        }
    }
    return same >= WHOLE_ARENA_MIN;
}

/* Release the empty pools among `n` consecutive pool positions of one mapping. */
static size_t release_in(struct seen *pools, size_t n, size_t pool_size, size_t arena_pools, size_t page,
                         size_t *released_pools) {
    size_t released = 0;
    for (size_t i = 0; i < n; i++) {
        if (!pools[i].valid || pools[i].count != 0) continue;
        if (!arena_confirmed(pools, n, i, arena_pools)) continue;
        uintptr_t p = pools[i].address;
        struct pool_header h; /* read again: the header must not have changed since */
        if (read_header(p, &h) != 0 || !valid(&h, pool_size) || h.count != 0 || h.arenaindex != pools[i].index)
            continue;
        size_t resident = resident_bytes(p + page, pool_size - page, page);
        if (!resident) continue; /* nothing to give back: leave the pool as it is */
        ((struct pool_header *)p)->szidx = DUMMY_SIZE_IDX;
        if (madvise((void *)(p + page), pool_size - page, MADV_DONTNEED) == 0) {
            released += resident;
            (*released_pools)++;
        }
    }
    return released;
}

/* Private anonymous read-write mappings of this process, from /proc/self/maps; returns how many. */
static size_t anon_mappings(uintptr_t (*out)[2], size_t max) {
    static char buf[1 << 16];
    size_t found = 0, have = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    for (;;) {
        ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
        if (got <= 0) break;
        have += (size_t)got;
        buf[have] = 0;
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = 0;
            unsigned long start, end, inode;
            char perms[8] = {0};
            int used = 0;
            if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &start, &end, perms, &inode, &used) >= 4 &&
                strcmp(perms, "rw-p") == 0 && inode == 0 && found < max &&
                (line[used] == 0 || strncmp(line + used, "[anon:", 6) == 0)) {
                out[found][0] = start;
                out[found][1] = end;
                found++;
            }
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
    }
    close(fd);
    return found;
}

/*
 * Every private anonymous mapping is looked at, one pool-aligned position at a
 * time (only positions whose first page is resident: a header is always
 * written). Returns the resident bytes released; *pools_out: how many pools.
 */
size_t memgap_release_empty_pools(size_t pool_size, size_t arena_size, size_t *pools_out) {
    static uintptr_t maps[4096][2];
    size_t page = (size_t)sysconf(_SC_PAGESIZE), released = 0, pools = 0;
    if (pools_out) *pools_out = 0;
    if (pool_size < 2 * page || pool_size % page != 0 || pool_size / page > 256 || arena_size < pool_size)
        return 0;
    size_t arena_pools = arena_size / pool_size + 1;
    size_t n_maps = anon_mappings(maps, sizeof maps / sizeof *maps);
    for (size_t m = 0; m < n_maps; m++) {
        uintptr_t first = (maps[m][0] + pool_size - 1) / pool_size * pool_size;
        if (first + pool_size > maps[m][1]) continue;
        size_t n = (maps[m][1] - first) / pool_size;
        struct seen *seen = mmap(NULL, n * sizeof *seen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (seen == MAP_FAILED) continue;
        for (size_t i = 0; i < n; i++) {
            uintptr_t p = first + i * pool_size;
            unsigned char in_core = 0;
            struct pool_header h;
            seen[i].address = p;
            seen[i].valid = mincore((void *)p, page, &in_core) == 0 && (in_core & 1) && read_header(p, &h) == 0 &&
                            valid(&h, pool_size);
            if (seen[i].valid) {
                seen[i].index = h.arenaindex;
                seen[i].count = h.count;
            }
        }
        released += release_in(seen, n, pool_size, arena_pools, page, &pools);
        munmap(seen, n * sizeof *seen);
    }
    if (pools_out) *pools_out = pools;
    return released;
}
