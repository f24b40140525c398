/* Holds 4 MiB from malloc, says "ready", and waits until stdin closes: a process to detect
 * allocators in. Built by tests/live/test_allocator_detect.py against each allocator; with an
 * argument, it first dlopen()s that library and calls its rjem_hold (a Rust library whose
 * heap is its own jemalloc), as Python loads an extension. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char *held = malloc(4 << 20);
    if (held == NULL)
        return 1;
    memset(held, 1, 4 << 20);
    if (argc > 1) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        size_t (*hold)(size_t) = lib ? (size_t (*)(size_t))dlsym(lib, "rjem_hold") : NULL;
        if (hold == NULL) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        hold(4 << 20);
    }
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return held[0] == 1 ? 0 : 3;
}
