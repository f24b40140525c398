"""Targets for `memgap serve-metrics`, which say what they hold, measured by themselves.
Nothing imports memgap.

  metrics_targets.py glibc MARK   mallocs 40 MiB in 64 KiB blocks (main arena), writes them,
                                  frees every other one; a thread mallocs, writes and frees 8 MiB
                                  (into its arena's top chunk, which malloc_trim(0) leaves alone:
                                  free, not releasable); prints {"pid", "freed", "thread_top"}, then
                                  on each stdin line: "trim" -> malloc_trim(0), prints
                                  {"before", "after"} (VmRSS bytes); anything else -> exit
  metrics_targets.py collector MARK  the same, with memgap.prometheus.MemgapCollector registered
                                  and prometheus_client's server on a free port of 127.0.0.1
                                  ({"port"} joins the JSON)
  metrics_targets.py tree MARK    a master holding 8 MiB forks 2 workers; worker number n
                                  (0, 1, 2, ... over the run) writes 8 * (n + 2) MiB of its own.
                                  Prints "workers PID PID" (oldest first) once they hold it; on
                                  each stdin line: "replace" -> the oldest worker exits and a new
                                  one starts (printed again); anything else -> all exit
  metrics_targets.py sleep MARK   prints "ready PID" and sleeps 60 s
  metrics_targets.py grow MARK    prints "ready PID"; on each stdin line "grow": writes 32 MiB more
                                  of its own, prints {"before", "after"} (VmRSS bytes); anything
                                  else -> exit

MARK is not read: it makes the command line unique for --match. Only "collector" imports memgap.
"""
import ctypes
import json
import os
import signal
import sys
import threading
import time

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 64 * KiB  # under glibc's mmap threshold (128 KiB): from the main arena's heap


def vmrss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * KiB for line in fh if line.startswith("VmRSS:"))


def glibc(serve=False):
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-1, 256 * MiB)  # M_TRIM_THRESHOLD: no trim of a top chunk on free()
    if serve:  # before the blocks: an import after would take some of the freed ones
        from prometheus_client import start_http_server

        from memgap.prometheus import MemgapCollector

        MemgapCollector()
        server, _ = start_http_server(0, addr="127.0.0.1")

    def thread_heap():
        held = [libc.malloc(BLOCK) for _ in range(8 * MiB // BLOCK)]
        for p in held:
            ctypes.memset(p, 1, BLOCK)
        for p in reversed(held):
            libc.free(p)

    worker = threading.Thread(target=thread_heap)
    worker.start()
    worker.join()
    blocks = [libc.malloc(BLOCK) for _ in range(40 * MiB // BLOCK)]
    for p in blocks:
        ctypes.memset(p, 1, BLOCK)
    # every other block freed: each sits in a bin between two blocks in use (no merging, and the
    # last block, next to the top chunk, is kept)
    for p in blocks[0::2]:
        libc.free(p)
    said = {"pid": os.getpid(), "freed": len(blocks[0::2]) * BLOCK, "thread_top": 8 * MiB}
    if serve:
        said["port"] = server.server_port
    print(json.dumps(said), flush=True)
    for line in sys.stdin:
        if line.strip() != "trim":
            return
        before = vmrss()
        libc.malloc_trim(0)
        print(json.dumps({"before": before, "after": vmrss()}), flush=True)


def worker(n, ready):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a worker never outlives its master
    own = b"\x01" * (8 * (n + 2) * MiB)  # written: every page resident
    os.write(ready, b"x")
    while own:
        signal.pause()


def tree():
    held = b"\x02" * (8 * MiB)
    workers, started = [], 0

    def start():
        nonlocal started
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            worker(started, w)
            os._exit(0)
        os.close(w)
        os.read(r, 1)  # the worker holds its memory now
        os.close(r)
        workers.append(pid)
        started += 1

    start()
    start()
    print("workers", *workers, flush=True)
    for line in sys.stdin:
        if line.strip() != "replace":
            break
        oldest = workers.pop(0)
        os.kill(oldest, signal.SIGTERM)
        os.waitpid(oldest, 0)
        start()
        print("workers", *workers, flush=True)
    for pid in workers:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    del held


def sleep():
    print("ready", os.getpid(), flush=True)
    time.sleep(60)


def grow():
    held = []
    print("ready", os.getpid(), flush=True)
    for line in sys.stdin:
        if line.strip() != "grow":
            return
        before = vmrss()
        held.append(b"\x03" * (32 * MiB))  # written: every page resident
        print(json.dumps({"before": before, "after": vmrss()}), flush=True)


{"glibc": glibc, "collector": lambda: glibc(serve=True), "tree": tree, "sleep": sleep, "grow": grow}[sys.argv[1]]()
