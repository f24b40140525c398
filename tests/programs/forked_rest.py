"""A preforked tree, as users run them: a master builds its data, forks two workers that
keep it (shared copy-on-write), each fill a private buffer of their own and rest, then
the master waits for them. Each process appends
"PID RSS PSS" (bytes, read from /proc/self at its rest) to argv[1]; nothing imports memgap.

    python forked_rest.py READINGS_FILE
"""
import os
import sys
import time

REST = 2.5  # seconds every process rests, all at once


def reading() -> str:
    fields = {}
    for name in ("status", "smaps_rollup"):
        with open(f"/proc/self/{name}") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields[key] = value.split()[0] if value.split() else ""
    return f"{os.getpid()} {int(fields['VmRSS']) * 1024} {int(fields['Pss']) * 1024}\n"


data = [str(i) * 4 for i in range(600_000)]  # about 50 MiB of small objects, shared after the fork
workers = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        private = bytearray(os.urandom(1 << 20) * 24)  # 24 MiB of the worker's own
        time.sleep(REST * 0.7)
        with open(sys.argv[1], "a") as out:
            out.write(reading())
        time.sleep(REST * 0.3)
        os._exit(0)
    workers.append(pid)
time.sleep(REST * 0.7)
with open(sys.argv[1], "a") as out:
    out.write(reading())
for pid in workers:
    os.waitpid(pid, 0)
