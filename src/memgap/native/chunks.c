/*
 * glibc's chunk headers stepped through at C speed: the loop of memgap.sources.glibc_chunks
 * (_python_window, its reference, tested side by side) over one window of a heap that memgap
 * read from another process (or its own) into a buffer of its own. It reads only that buffer.
 *
 * words: the window's 8-byte words; a chunk header at word i has prev_size at words[i] and its
 * size word at words[i + 1]. st: [0] i, [1] end (headers at i < end are in the window), [2] the
 * size word of the chunk before i, [3] chunks, [4] free chunks under a page, [5] their bytes,
 * [6] 1 when every page of the window is resident, [7] 1 to skip the free test at i once.
 *
 * Returns 0 at end, 1 at a header whose size is under MINSIZE (i at it), 2 at a free chunk left
 * to the caller (i at the header after it, whose PREV_INUSE bit is clear: one of a page or more,
 * one that began before the window, or any in a window with pages not resident), 3 at a free
 * chunk whose size the next chunk's prev_size does not repeat.
 */
#include <stdint.h>

int memgap_walk_chunks(const uint64_t *words, uint64_t *st) {
    uint64_t i = st[0], end = st[1], prev_raw = st[2], chunks = st[3], count = st[4], bytes = st[5];
    int whole = st[6] != 0, skip = st[7] != 0, why = 0;
    while (i < end) {
        uint64_t raw = words[i + 1];
        if (!(raw & 1) && !skip) {
            uint64_t prev_size = prev_raw & ~(uint64_t)7;
            if (!prev_size || words[i] != prev_size) {
                why = 3;
                break;
            }
            if (prev_size >= 4096 || !whole || (i << 3) < prev_size) {
                why = 2;
                break;
            }
            count++;
            bytes += prev_size;
        }
        skip = 0;
        if (raw < 32) {
            why = 1;
            break;
        }
        prev_raw = raw;
        chunks++;
        i += raw >> 3;
    }
    st[0] = i;
    st[2] = prev_raw;
    st[3] = chunks;
    st[4] = count;
    st[5] = bytes;
    return why;
}
