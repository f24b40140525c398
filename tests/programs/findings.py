"""Programs that hold what a finding of memgap.diagnose.findings is about, and say what they hold,
measured by themselves (their own counts, glibc's malloc_info, VmRSS), apart from memgap.

  findings.py arenas THREADS KIB     THREADS threads, alive together, each malloc KIB KiB in
                                     64 KiB buffers and free 3 of every 4 (the 4th pins them)
  findings.py protnone MIB BALLAST   MIB MiB of written memory turned PROT_NONE, beside BALLAST
                                     MiB of written memory outside every allocator
  findings.py pymalloc N BALLAST     N 64-byte objects, all but 1 in 64 freed (every pool keeps
                                     live blocks); then memgap.snapshot() in this process
  findings.py dlopen LIBRARY         LIBRARY loaded with ctypes (not preloaded); then
                                     memgap.snapshot() in this process
  findings.py phases STEP...         under `memgap run`: each STEP is NAME:WHAT, then
                                     memgap.phase(NAME); WHAT is objects+MIB (small objects,
                                     held), objects-MIB (the newest of them freed), buffers+MIB
                                     (64 KiB buffers, held), buffers-all (all but the last freed),
                                     or nothing

The first three print one JSON line, then wait for a line on stdin (the test reads the
process from outside meanwhile); pymalloc and dlopen print their snapshot with the JSON and
exit; phases prints a JSON line per phase on stderr ("witness {...}"), after the phase's snapshot.
"""
import ctypes
import json
import mmap
import os
import sys
import tempfile
import threading

KiB, MiB = 1 << 10, 1 << 20
BUFFER = 64 * KiB  # under glibc's mmap threshold (128 KiB): from an arena's heap
BLOCK = 64  # sys.getsizeof(b"%031d" % i): a 64-byte pymalloc block each


def rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * KiB for line in fh if line.startswith("VmRSS:"))


def small_objects(count, start=0):
    objects = [b"%031d" % (start + i) for i in range(count)]  # distinct, not interned
    assert sys.getsizeof(objects[0]) == BLOCK
    return objects


def write_pages(size):
    """``size`` bytes of private anonymous memory outside every allocator, every page written."""
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = ctypes.c_char.from_buffer(area)
    ctypes.memset(ctypes.addressof(view), 1, size)
    del view  # the buffer's export, released: the mapping stays as long as ``area``
    return area


def glibc_heaps():
    """glibc's own count of its arenas: the <heap nr=...> elements of malloc_info."""
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile("r", suffix=".xml") as out:
        fp = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, fp)
        libc.fclose(fp)
        return out.read().count("<heap nr=")


def arenas(threads, kib):
    n = kib * KiB // BUFFER
    allocated, freed = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    done = threading.Event()

    def work():
        # every thread allocates while all the others are alive: each gets an arena of its own
        # (glibc makes new ones up to 8 per CPU before threads share)
        buffers = [bytearray(BUFFER) for _ in range(n)]
        for b in buffers:
            b[::4096] = b"x" * len(b[::4096])  # calloc'ed: written, so resident
        allocated.wait()
        for i in range(n):
            if i % 4 != 3:
                buffers[i] = None
        freed.wait()
        done.wait()

    for _ in range(threads):
        threading.Thread(target=work, daemon=True).start()
    allocated.wait()
    freed.wait()
    print(json.dumps({"threads": threading.active_count(), "freed": threads * (n - n // 4) * BUFFER,
                      "heaps": glibc_heaps(), "rss": rss()}), flush=True)
    sys.stdin.readline()


def protnone(mib, ballast):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = mib * MiB
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    ctypes.memset(address, 1, size)
    assert libc.mprotect(address, size, 0) == 0, os.strerror(ctypes.get_errno())  # PROT_NONE, pages kept
    kept = write_pages(ballast * MiB) if ballast else None
    print(json.dumps({"protected": size, "ballast": len(kept) if kept else 0, "rss": rss()}), flush=True)
    sys.stdin.readline()


def snapshot_json(**witness):
    import memgap

    snap = memgap.snapshot(regions=False)
    witness["rss_after"] = rss()
    print(json.dumps({**witness, "snapshot": snap.to_dict(regions=False)}))


def pymalloc(count, ballast):
    kept_ballast = b"\x01" * (ballast * MiB) if ballast else b""  # every page written
    objects = small_objects(count)
    survivors = objects[::64]
    freed = (len(objects) - len(survivors)) * BLOCK
    del objects
    snapshot_json(freed=freed, held=len(survivors) * BLOCK, ballast=len(kept_ballast), rss=rss())


def dlopen(library):
    ctypes.CDLL(library)
    snapshot_json(library=library)


HELD = {"objects": [], "buffers": []}  # a global: still held when the exit snapshot is taken


def phases(steps):
    import memgap

    objects, buffers = HELD["objects"], HELD["buffers"]
    for step in steps:
        name, _, what = step.partition(":")
        if what.startswith("objects+"):
            objects.extend(small_objects(int(what[8:]) * MiB // BLOCK, len(objects)))
        elif what.startswith("objects-"):
            del objects[len(objects) - int(what[8:]) * MiB // BLOCK:]
        elif what.startswith("buffers+"):
            for _ in range(int(what[8:]) * MiB // BUFFER):
                buffers.append(bytearray(b"x") * BUFFER)  # written: resident
        elif what == "buffers-all":
            del buffers[:-1]  # the last one stays: it pins the heap's top, so glibc keeps the rest
        elif what:
            raise SystemExit(f"unknown step {step!r}")
        memgap.phase(name)
        # VmRSS read after the phase's snapshot: the first loads memgap's snapshot machinery (0.7 MiB
        # of RSS) before it reads a figure, so every phase's figures hold it, and the witness's must too
        print("witness " + json.dumps({"phase": name, "rss": rss(), "objects": len(objects) * BLOCK,
                                       "buffers": len(buffers) * BUFFER}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "arenas":
        arenas(int(args[0]), int(args[1]))
    elif mode == "protnone":
        protnone(int(args[0]), int(args[1]))
    elif mode == "pymalloc":
        pymalloc(int(args[0]), int(args[1]))
    elif mode == "dlopen":
        dlopen(args[0])
    elif mode == "phases":
        phases(args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
