"""A preforked server's memory, as gunicorn --preload makes it: a master loads a table of
small dicts (about 70 MiB of objects the collector tracks: each holds a list), forks three workers, and each
worker serves "requests" that run a full collection, as a busy worker eventually does; then
all rest at once. Nothing imports memgap. Each process appends "PID RSS PSS USS" (bytes,
from its own /proc/self) to argv[1] during the rest.

    python prefork_gc.py READINGS_FILE          # all rest 2.5 s, then exit
    python prefork_gc.py READINGS_FILE hold     # each says "ready PID" once it rests, and rests
                                                # until killed (60 s at most)
"""
import gc
import os
import sys
import time

from own_figures import write_own_figures  # beside this script

REST = 2.5


HOLD = sys.argv[2:] == ["hold"]


def rest() -> None:
    if HOLD:
        os.write(1, f"ready {os.getpid()}\n".encode())  # one write: four processes share the pipe
        time.sleep(60)
        return
    time.sleep(REST * 0.7)
    reading()
    time.sleep(REST * 0.3)


def reading(*_: object) -> None:
    write_own_figures(sys.argv[1])


table = [{"id": i, "name": f"row-{i}", "tags": [i]} for i in range(200_000)]  # a list inside: tracked for good
workers = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        for _request in range(3):
            gc.collect()  # a full collection walks every tracked object: it writes into each one's header
        rest()
        os._exit(0)
    workers.append(pid)
if HOLD:
    rest()
else:
    time.sleep(REST * 0.7)
    reading()
for pid in workers:
    os.waitpid(pid, 0)
