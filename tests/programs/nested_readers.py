"""Forked readers one level down: fork_readers.py's data and reads (its dicts built at import, its ``work``:
two passes in a random order, "read PID", a rest), but the parent forks one worker, and the worker forks 2
readers of its own, as a DataLoader started inside a worker process does: the readers' copies are of pages
their parent (the worker) shares with its own. Nothing imports memgap.

    python nested_readers.py [N] [REST]    # N dicts (fork_readers' default: 1,000,000), REST seconds (3)
"""
import os
import time

import fork_readers  # beside this file: the data is built as it is imported

READERS = 2


def fork(target, *args) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(0)
    return pid


def worker() -> None:
    for pid in [fork(fork_readers.work, seed) for seed in range(READERS)]:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    os.waitpid(fork(worker), 0)
    time.sleep(fork_readers.REST / 2)
