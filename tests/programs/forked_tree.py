"""A preforked tree, as users run them: a master builds about 50 MiB of small Python
objects, forks two workers ($WORKERS: a lab's --param sweeps it) that keep them (shared
copy-on-write) and each fill 24 MiB of their own. Nothing imports memgap. Each process
appends "PID RSS PSS USS" (bytes, from its own /proc/self) to argv[1]:

    python forked_tree.py READINGS_FILE hold   # each says "ready PID" on stdout, reads on
                                               # SIGUSR1, and rests until killed (60 s at most)
    python forked_tree.py READINGS_FILE rest   # all rest 2.5 s at once, reading 1.75 s in,
                                               # then the workers exit and the master after them
"""
import os
import signal
import sys
import time

from own_figures import write_own_figures  # beside this script

REST = 2.5


def reading(*_: object) -> None:
    write_own_figures(sys.argv[1])


def rest() -> None:
    if sys.argv[2] == "hold":
        signal.signal(signal.SIGUSR1, reading)
        os.write(1, f"ready {os.getpid()}\n".encode())  # one write: three processes share the pipe
        time.sleep(60)
    else:
        time.sleep(REST * 0.7)
        reading()
        time.sleep(REST * 0.3)


data = [str(i) * 4 for i in range(600_000)]  # about 50 MiB of small objects, shared after the fork
workers = []
for _ in range(int(os.environ.get("WORKERS", "2"))):
    pid = os.fork()
    if pid == 0:
        private = bytearray(os.urandom(1 << 20) * 24)  # 24 MiB of the worker's own
        rest()
        os._exit(0)
    workers.append(pid)
rest()
for pid in workers:
    os.waitpid(pid, 0)
