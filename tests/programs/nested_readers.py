"""Forked readers one level down: a parent builds N small dicts (as fork_readers.py's), forks a worker that
forks 2 readers of its own, each of which reads the dicts twice in its own random order, says
"read PID" and rests; nothing else runs. Nothing imports memgap. As a DataLoader started inside a
worker process does: the readers' copies are of pages their parent (the worker) shares with its own.

    python nested_readers.py [N] [REST]    # N dicts (100,000 by default), REST seconds of rest (3)
"""
import os
import random
import sys
import time
from array import array

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
REST = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
READERS = 2

DATA = [{"path": f"/srv/data/{i % 997}/part-{i:07d}.bin", "size": i * 7 + 1_000_003, "mtime": 1_700_000_000 + i}
        for i in range(N)]


def read(seed: int) -> None:
    order = array("I", range(len(DATA)))
    random.Random(seed).shuffle(order)
    total = 0
    for _ in range(2):
        for i in order:
            row = DATA[i]
            total += row["size"] + row["mtime"] + len(row["path"])
    os.write(1, f"read {os.getpid()} {total % 1000}\n".encode())
    time.sleep(REST)


def fork(target, *args) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(0)
    return pid


def worker() -> None:
    for pid in [fork(read, seed) for seed in range(READERS)]:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    os.waitpid(fork(worker), 0)
    time.sleep(REST / 2)
