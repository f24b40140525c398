"""A 9-process tree, as a preforked server runs: a master builds small Python objects (about 20 MiB),
forks 8 workers ($WORKERS) that keep them (shared copy-on-write) and each fill MIB MiB of their own
(bytearrays, touched) and some small objects. Nothing imports memgap.

    python tree9.py [MIB]     # default 16

Prints "ready <master pid> <worker pids...>" once every worker holds its memory, and rests until
stdin closes (every process of the tree reads it: each sees the end).
"""
from __future__ import annotations

import os
import sys


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    shared = [(i, str(i)) for i in range(200_000)]  # the master's objects, shared by every worker
    workers = []
    ready_r, ready_w = os.pipe()
    for _ in range(int(os.environ.get("WORKERS", "8"))):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            try:
                keep = [bytearray(1 << 20) for _ in range(mib)]
                for block in keep:
                    block[::4096] = b"\1" * len(block[::4096])
                small = [str(i) * 3 for i in range(50_000)]
                os.write(ready_w, b".")
                sys.stdin.read()
                del keep, small
            finally:
                os._exit(0)
        workers.append(pid)
    os.close(ready_w)
    for _ in workers:
        os.read(ready_r, 1)
    print("ready", os.getpid(), *workers, flush=True)
    sys.stdin.read()
    for pid in workers:
        os.waitpid(pid, 0)
    del shared


if __name__ == "__main__":
    main()
