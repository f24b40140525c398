"""Whether memgap's in-process snapshot changes how glibc's malloc serves the program after it (a probe, not a
timing: the "never change the target" rule, checked where memgap runs inside the program).

glibc serves a request above its mmap threshold (128 KiB at start) with a mapping of its own, returned to the
kernel when freed; and when a program frees such a chunk, glibc raises the threshold to that chunk's size (up
to 32 MiB) and the trim threshold to twice it: requests up to that size then come from the arenas, whose free
memory stays resident. So a buffer or container of memgap's above the threshold, made and freed during a
snapshot in the program's own process (``memgap.snapshot()``, ``memgap.phase()`` under ``memgap run``),
moves the program's threshold too.

The probe must not move it itself: a block it finds mmapped is kept, never freed. It imports memgap's
snapshot machinery first (the imports are the program's start, not the snapshot), maps what a big process
maps (a 1 GiB private mapping with a page a MiB touched, a 111 MiB library mapped from its file), finds the
threshold (the smallest of 128 KiB x 2^k, up to 32 MiB, that glibc serves with a mapping of its own: each
block's IS_MMAPPED bit), takes ``memgap.snapshot()`` and finds it again. Prints both; exits 1 where the
snapshot raised it.

    PYTHONPATH=src python tests/programs/own_threshold.py [MAPPINGS]   # MAPPINGS one-page mappings too
"""
from __future__ import annotations

import ctypes
import mmap
import sys

LIBRARY = "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1"  # any large file: its mapping's pagemap is what is read


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


KEPT: list[int] = []  # the probe's own mmapped blocks, never freed: freeing one would raise the threshold itself


def mmapped(libc: ctypes.CDLL, size: int) -> bool:
    """Whether glibc serves ``size`` bytes with a mapping of their own now (a block from the heap is freed,
    which moves no threshold; an mmapped one is kept)."""
    block = libc.malloc(size)
    header = ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value
    if header & 2:
        KEPT.append(block)
    else:
        libc.free(block)
    return bool(header & 2)


LADDER = [128 << 10 << k for k in range(9)]  # 128 KiB .. 32 MiB, glibc's largest dynamic threshold


def threshold(libc: ctypes.CDLL) -> int | None:
    """The smallest size on the ladder glibc serves with a mapping of its own now (None: none of them)."""
    return next((size for size in LADDER if mmapped(libc, size)), None)


def many_mappings(count: int) -> list[mmap.mmap]:
    """``count`` one-page mappings the kernel cannot merge (their protections alternate): a maps file of
    ~80 bytes a line, as a big process has (1,600 mappings: a PyTorch process's)."""
    return [mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ if i % 2 else mmap.PROT_READ | mmap.PROT_WRITE)
            for i in range(count)]


def main() -> int:
    import memgap
    import memgap.explain.snapshot  # imported before: the start's imports are not the snapshot

    libc = _libc()
    big = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, 1 << 30, 1 << 20):  # a page a MiB touched: 1,024 resident pages of 262,144
        big[offset] = 1
    with open(LIBRARY, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    small = many_mappings(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    before = threshold(libc)
    memgap.snapshot()
    after = threshold(libc)
    shown = {k: "none" if v is None else f"{v >> 10} KiB" for k, v in (("before", before), ("after", after))}
    print(f"smallest block glibc mmaps: before memgap.snapshot() {shown['before']}, after it {shown['after']}")
    raised = after is None or (before is not None and after > before)
    print("the snapshot raised the program's mmap threshold" if raised else "the snapshot left it as it was")
    for each in [*small, mapped, big]:
        each.close()
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main())
