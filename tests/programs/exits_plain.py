"""A plain Python script that exits after its work, as users bring them: it builds and drops a table,
keeps a smaller one, and as its atexit handler (which runs after its interpreter began to shut down)
writes to argv[1] which of memgap's modules are loaded in it and its own VmRSS then.
It does not import memgap; under `memgap run` its bootstrap does, as little as it can."""
import atexit
import sys


def own_rss() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def at_exit() -> None:
    loaded = sorted(name for name in sys.modules if name == "memgap" or name.startswith("memgap."))
    with open(sys.argv[1], "w") as fh:
        fh.write(f"rss {own_rss()}\n")
        fh.write("modules " + " ".join(loaded) + "\n")


table = {i: [str(i)] * 8 for i in range(300_000)}
del table
kept = [bytes(2000) for _ in range(20_000)]  # 40 MB kept to the end
atexit.register(at_exit)
