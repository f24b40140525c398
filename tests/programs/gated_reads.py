"""memgap's command line (its arguments after the first two), with its first read from outside of a
process named NAME held: as it begins, it writes "PID TIME" into GATE/reading and waits until the
file GATE/go exists (two minutes at most), then reads as memgap always does. A test's seam, on
memgap's own side (the program it reads knows nothing of it): a read as slow as the test wants,
ended when the test has seen what it waits for, with no timing to guess.

    python gated_reads.py GATE NAME run --json OUT -- PROGRAM ...
"""
import os
import sys
import time

import memgap.explain.snapshot as snapshot
from memgap.cli import main

GATE, NAME = sys.argv[1], sys.argv[2]
real = snapshot.snapshot_pid
held: list[int] = []  # the process of memgap's that reads holds one read, once


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def gated(pid, *args, **kwargs):
    if not held and _comm(pid) == NAME:
        held.append(pid)
        with open(os.path.join(GATE, "reading.part"), "w") as fh:
            fh.write(f"{pid} {time.time()}\n")
        os.rename(os.path.join(GATE, "reading.part"), os.path.join(GATE, "reading"))
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(GATE, "go")) and time.monotonic() < deadline:
            time.sleep(0.01)
    return real(pid, *args, **kwargs)


snapshot.snapshot_pid = gated
sys.exit(main(sys.argv[3:]))
