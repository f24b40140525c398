"""A fragmented glibc heap made of Python bytes objects over 512 bytes (which CPython takes from
malloc, not pymalloc), with glibc's own count of it (mallinfo2) on request. Does not import memgap.

One command a line on stdin, one reply a line on stdout:
  frag N MIN MAX KEEP   N bytes objects of MIN..MAX bytes (a fixed seed), all but every KEEP-th dropped
  strings N KEEP        N short strings (pymalloc's blocks), all but every KEEP-th dropped
  trace                 tracemalloc.start(): every allocation traced from here on
  trim                  malloc_trim(0)
  stats                 mallinfo2's figures and VmRSS
"""
import ctypes
import random
import sys
import tracemalloc


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
kept = []


def rss() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def frag(n: int, low: int, high: int, keep: int) -> None:
    rng = random.Random(1)
    made = [b"x" * rng.randint(low, high) for _ in range(n)]
    kept.extend(made[::keep])
    del made


for line in sys.stdin:
    words = line.split()
    if words[:1] == ["frag"]:
        frag(*map(int, words[1:5]))
        reply = "ok"
    elif words[:1] == ["strings"]:
        n, keep = map(int, words[1:3])
        made = [str(i) * 3 for i in range(n)]
        kept.extend(made[::keep])
        del made
        reply = "ok"
    elif words == ["trace"]:
        tracemalloc.start()
        reply = "ok"
    elif words == ["trim"]:
        reply = f"ok trimmed={libc.malloc_trim(0)}"
    elif words == ["stats"]:
        mi = libc.mallinfo2()
        reply = "ok " + " ".join(f"{k}={getattr(mi, k)}" for k in ("uordblks", "fordblks", "hblkhd", "hblks", "arena"))
        reply += f" rss={rss()}"
    else:
        reply = "err unknown command"
    print(reply, flush=True)
