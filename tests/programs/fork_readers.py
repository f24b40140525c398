"""A data loader's memory, as `multiprocessing` with the fork start method makes it: a parent
builds N small dicts (a path string and two ints each: the collector does not track a dict of
atomic values), forks 4 workers that only read them, each in its own random order, for two
passes, then all rest and exit. Nothing imports memgap. A worker's reads write the reference
counts of the parent's objects, so each page of them it reads becomes its own copy.

    python fork_readers.py [N] [REST]    # N dicts (1,000,000 by default), REST seconds of rest (3)

Each worker prints "read PID" once its passes are done (one write: the workers share the pipe).
"""
import multiprocessing
import os
import random
import sys
import time
from array import array

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
REST = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
WORKERS = 4


def work(seed: int) -> None:
    order = array("I", range(len(DATA)))  # 4 bytes an index: the worker's own memory stays small
    random.Random(seed).shuffle(order)
    total = 0
    for _ in range(2):
        for i in order:
            row = DATA[i]
            total += row["size"] + row["mtime"] + len(row["path"])
    os.write(1, f"read {os.getpid()} {total % 1000}\n".encode())
    time.sleep(REST)


DATA = [{"path": f"/srv/data/{i % 997}/part-{i:07d}.bin", "size": i * 7 + 1_000_003, "mtime": 1_700_000_000 + i}
        for i in range(N)]

if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=work, args=(seed,)) for seed in range(WORKERS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    time.sleep(REST / 2)
