"""A pyarrow workload that does not import memgap (issue 31, item 3): THREADS threads each build
tables, sort them, group them and drop them, ROUNDS times, the last round's tables dropped by all the
threads at one moment (a parallel stage's end), and end; then the program prints "resting" with arrow's
pool's own figures and rests until killed (or for REST_S seconds).

What its mimalloc keeps at rest is what was freed within its purge delay (1 s) before the last call into
it: threads that end one by one, seconds apart under load, let it purge a varying part (68 to 329 MiB of
a 480 MiB rest in three runs); ending together, the last round's memory stays. (Threads that stay, idle,
keep more: the pool's release, mi_collect, collects the calling thread's heap and the ended threads'.)

Sizes by environment: ARROW_ROWS (rows per table), ARROW_THREADS, ARROW_ROUNDS, ARROW_REST_S.
Everything the threads made is dropped before the rest: arrow's pool says 0 bytes allocated, and
what RSS still holds is what its allocator keeps.
"""
import os
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROWS = int(os.environ.get("ARROW_ROWS", "800000"))
THREADS = int(os.environ.get("ARROW_THREADS", "8"))
ROUNDS = int(os.environ.get("ARROW_ROUNDS", "2"))
REST_S = float(os.environ.get("ARROW_REST_S", "3600"))


def one_round(seed: int) -> tuple[pa.Table, ...]:
    """One table built, sorted and grouped: every buffer arrow's own (no Python object per row)."""
    base = pa.array(np.arange(seed, seed + ROWS, dtype=np.int64))
    keys = pc.bit_wise_and(pc.multiply(base, 7919), 4095)  # 4,096 groups
    values = pc.multiply(pc.cast(base, pa.float64()), 0.5)
    names = pc.cast(pc.bit_wise_and(base, 8191), pa.string())
    table = pa.table({"key": keys, "value": values, "name": names})
    ordered = table.sort_by([("key", "ascending"), ("name", "descending")])
    return table, ordered, ordered.group_by("key").aggregate([("value", "sum"), ("name", "count")])


def worker(index: int, done: threading.Barrier) -> None:
    for r in range(ROUNDS - 1):
        one_round(index * 1_000_003 + r * 17)  # dropped at once
    last = one_round(index * 1_000_003 + ROUNDS * 17)
    # the threads finish together, as a parallel stage does: their last tables dropped at one moment
    done.wait()
    del last


def main() -> None:
    done = threading.Barrier(THREADS)
    threads = [threading.Thread(target=worker, args=(i, done)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool = pa.default_memory_pool()
    print(f"resting backend={pool.backend_name} allocated={pool.bytes_allocated()} "
          f"peak={pool.max_memory()}", flush=True)
    if len(sys.argv) > 1 and sys.argv[1] == "--release":
        pool.release_unused()
        print("released", flush=True)
    time.sleep(REST_S)


if __name__ == "__main__":
    main()
