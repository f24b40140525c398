"""A witness for memgap's Python layers: holds and frees known objects, and says
what it holds, measured by the interpreter itself (sys.getsizeof) and by glibc
(mallinfo2), next to memgap's in-process snapshots.

Prints one JSON line, then waits for a line on stdin (so the test can read
/proc/PID/smaps while nothing here moves), then exits.
"""
import ctypes
import json
import mmap
import sys

import memgap

ALIGNMENT = 16  # pymalloc's block sizes are multiples of 16 bytes on 64-bit CPython (3.8+)


def block_bytes(objects):
    """Bytes of the pymalloc blocks behind ``objects``: each request rounded up to a block size."""
    return sum(-(-sys.getsizeof(o) // ALIGNMENT) * ALIGNMENT for o in objects)


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2


def glibc_in_use():
    mi = libc.mallinfo2()
    return mi.uordblks + mi.hblkhd


def layers():
    """memgap's layers, with glibc's own in-use count read just before and just after them."""
    before = glibc_in_use()
    snap = memgap.snapshot(regions=False)
    after = glibc_in_use()
    out = {name: layer.resident for name, layer in snap.layers.items()}
    out.update(rss=snap.rss, glibc_in_use=(before, after),
               glibc_problems=snap.layers["allocator_free"].detail["problems"])
    return out


layers()  # the first snapshot loads memgap's modules (a fresh clone compiles them too): not between two compared
steps = {"start": layers()}

# 1,000,000 ints past the small-int cache, each its own 32-byte pymalloc block,
# and the list's 8 MB array of pointers, which is too big for pymalloc: malloc's.
ints = list(range(10**6, 2 * 10**6))
# 200,000 tuples chained through each other, each with an int of its own
chain = None
for i in range(200_000):
    chain = (i + 3 * 10**6, chain)
links, node = [], chain
while node is not None:
    links.append(node)
    node = node[1]
held = block_bytes(ints) + block_bytes(links) + block_bytes(t[0] for t in links)
list_array = sys.getsizeof(ints) - sys.getsizeof([])
del links, node
steps["held"] = layers()

# 7 of every 8 ints freed: every pool keeps live blocks, so the freed blocks stay in
# pymalloc's arenas, their pages resident
freed = block_bytes(ints[i] for i in range(len(ints)) if i % 8)
for i in range(len(ints)):
    if i % 8:
        ints[i] = None
steps["freed"] = layers()

# 48 MiB of private anonymous memory outside every allocator, every page written
anon = mmap.mmap(-1, 48 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for offset in range(0, len(anon), mmap.PAGESIZE):
    anon[offset] = 1
steps["anon"] = layers()

print(json.dumps({"held": held, "list_array": list_array, "freed": freed, "anon": len(anon), "steps": steps}),
      flush=True)
sys.stdin.readline()
