"""A preforked tree that holds still until asked: a master builds about 50 MiB of small
Python objects, forks two workers that keep them (shared copy-on-write) and each fill
24 MiB of their own. Every process writes "ready PID" to stdout once it holds what it
will hold, and on SIGUSR1 appends "PID RSS PSS USS" (bytes, from its own /proc/self) to
argv[1], so a reader outside can take its own figures at the moment it asks for these.
Nothing imports memgap; every process rests until killed (60 s at most).

    python forked_hold.py READINGS_FILE
"""
import os
import signal
import sys
import time


def reading(*_: object) -> None:
    fields = {}
    for name in ("status", "smaps_rollup"):
        with open(f"/proc/self/{name}") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields[key] = int(value.split()[0]) * 1024 if value.split()[1:] == ["kB"] else 0
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    with open(sys.argv[1], "a") as out:
        out.write(f"{os.getpid()} {fields['VmRSS']} {fields['Pss']} {uss}\n")


def rest() -> None:
    signal.signal(signal.SIGUSR1, reading)
    os.write(1, f"ready {os.getpid()}\n".encode())  # one write: three processes share the pipe
    time.sleep(60)


data = [str(i) * 4 for i in range(600_000)]  # about 50 MiB of small objects, shared after the fork
workers = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        private = bytearray(os.urandom(1 << 20) * 24)  # 24 MiB of the worker's own
        rest()
        os._exit(0)
    workers.append(pid)
rest()
