"""A program that knows nothing of memgap: a burst of work that leaves glibc holding
freed memory, its own RSS reading at the end of the work (a line "work BYTES"
appended to argv[2]), then a rest of argv[1] seconds, and its reading after the
rest ("rest BYTES") before it exits."""
import sys
import time


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


data = [bytes(2048) for _ in range(60000)]
keep = data[::16]  # one live chunk in sixteen: the freed ones cannot coalesce into the top
del data
spin = time.time()
while time.time() - spin < 0.3:
    sum(range(1000))
with open(sys.argv[2], "a") as out:
    out.write(f"work {rss()}\n")
time.sleep(float(sys.argv[1]))
with open(sys.argv[2], "a") as out:
    out.write(f"rest {rss()}\n")
