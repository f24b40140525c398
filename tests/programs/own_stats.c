/* Holds and frees known amounts under tcmalloc (built with -DTCMALLOC, linked with Debian's
 * libtcmalloc_minimal.so.4) or mimalloc (-DMIMALLOC, libmimalloc.so.2), then prints the
 * allocator's own figures on one line (name=value ...) and says "ready". Each line on stdin
 * makes it print them again; it exits when stdin closes. Built by tests/live/test_tcmi_deep.py,
 * which checks `memgap inspect --deep` and `--trim` against the figures the program prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL 80000      /* blocks of 1000 bytes: 80 MB, the first three quarters freed (under
                            mimalloc that empties a whole 32 MiB segment, which mi_collect returns) */
#define LARGE 12         /* blocks of 2 MiB: 24 MiB, all but two freed */

#ifdef TCMALLOC
int MallocExtension_GetNumericProperty(const char *property, size_t *value);

static const char *names[] = {
    "generic.current_allocated_bytes", "generic.heap_size", "tcmalloc.pageheap_free_bytes",
    "tcmalloc.pageheap_unmapped_bytes", "tcmalloc.central_cache_free_bytes",
    "tcmalloc.transfer_cache_free_bytes", "tcmalloc.thread_cache_free_bytes", "generic.total_physical_bytes"};

static void print_stats(void) {
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t value = 0;
        if (MallocExtension_GetNumericProperty(names[i], &value)) printf("%s%s=%zu", i ? " " : "", names[i], value);
    }
    printf("\n");
    fflush(stdout);
}
#elif defined(MIMALLOC)
void mi_process_info(size_t *elapsed_msecs, size_t *user_msecs, size_t *system_msecs, size_t *current_rss,
                     size_t *peak_rss, size_t *current_commit, size_t *peak_commit, size_t *page_faults);

static void print_stats(void) {
    size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
    mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
    printf("current_rss=%zu peak_rss=%zu current_commit=%zu peak_commit=%zu\n", rss, peak_rss, commit, peak_commit);
    fflush(stdout);
}
#else
#error "build with -DTCMALLOC or -DMIMALLOC"
#endif

int main(int argc, char **argv) {
    static void *small[SMALL], *large[LARGE];
    /* an argument divides the amounts (SMALL and LARGE blocks alike): a program under the findings' floors */
    int scale = argc > 1 ? atoi(argv[1]) : 1, nsmall = SMALL / scale, nlarge = LARGE / scale;
    for (int i = 0; i < nsmall; i++) {
        small[i] = malloc(1000);
        memset(small[i], 1, 1000);
    }
    for (int i = 0; i < nlarge; i++) {
        large[i] = malloc(2 << 20);
        memset(large[i], 1, 2 << 20);
    }
    /* whole runs of small blocks go (their pages become free), and most of the large ones */
    for (int i = 0; i < nsmall * 3 / 4; i++) free(small[i]);
    for (int i = 2; i < nlarge; i++) free(large[i]);
    print_stats();
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin))
        print_stats();
    return 0;
}
