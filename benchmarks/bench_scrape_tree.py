"""What a scrape of `memgap serve-metrics --tree MASTER` costs on a 16-worker tree, old and new path.

    PYTHONPATH=src python benchmarks/bench_scrape_tree.py [--workers 16] [--scrapes 30] [--hold-mib 20]
                                                          [--refresh 10]

A master (plain Python, no memgap) builds ``--hold-mib`` MiB of Python objects and a bytes
buffer of the same size, then forks ``--workers`` workers that each build as much again of
their own and sleep (idle, as gunicorn's sync workers between requests). Two servers serve the
tree: `--refresh 0` (the old path: every scrape reads every process) and `--refresh S` (a
collection every S seconds in a thread, a scrape serves the last one). /metrics of each is
fetched over loopback ``--scrapes`` times, in turn (old, new, old, new...), so both meet the
same load. Printed for each: the first scrape apart, then the median and range of the others
timed around the HTTP request; the CPU (user + system) a collection costs: per scrape for the
old path (/proc/PID/stat), per collection for the new (its own ``memgap_collection_seconds``,
and the server's CPU over the run divided by its collections); the collections' ages served.
Issue 13's goal: a scrape of a 16-worker tree under 100 ms.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

TREE = """
import os, sys, time
workers, hold = int(sys.argv[1]), int(sys.argv[2]) << 20
def build():
    objs = [(i, str(i)) for i in range(hold // 160)]  # about 160 bytes of small objects each
    return objs, b"x" * hold
keep = build()
children = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        mine = build()
        while True:
            time.sleep(60)
    children.append(pid)
print("ready", flush=True)
while True:
    time.sleep(60)
"""


def _cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (/proc/PID/stat, clock ticks)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f}"


def _gauge(body: str, name: str) -> float:
    return float(re.search(rf"^{name} (\S+)$", body, re.M).group(1))


class _Served:
    """One `memgap serve-metrics --tree` server and what its scrapes took."""

    def __init__(self, tree: int, refresh: float, env: dict[str, str]) -> None:
        began = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "memgap", "serve-metrics", "--tree", str(tree),
                                      "--port", "0", "--address", "127.0.0.1", "--refresh", f"{refresh:g}"],
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        url = re.match(r"memgap: serving (\S+) ", line)
        assert url, line
        self.started = time.perf_counter() - began
        self.url, self.walls, self.bodies = url.group(1), [], []
        self.cpu_began = _cpu(self.proc.pid)  # after its first read (at start, before it serves)

    def scrape(self) -> None:
        began = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=60) as resp:
            body = resp.read().decode()
        self.walls.append(time.perf_counter() - began)
        self.bodies.append(body)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _report(name: str, served: _Served) -> None:
    walls = served.walls
    print(f"{name:28} first {_ms(walls[0])}   next {len(walls) - 1}: median {_ms(statistics.median(walls[1:]))} "
          f"({_ms(min(walls[1:])).strip()}-{_ms(max(walls[1:])).strip()})")


def _cpu_figures(old: _Served, new: _Served) -> None:
    old_cpu = (_cpu(old.proc.pid) - old.cpu_began) / len(old.walls)
    new_cpu = _cpu(new.proc.pid) - new.cpu_began
    # each collection's own CPU, as served; the first (at start, before serving: imports and caches
    # filled) apart, as the old path's first read is left out of its CPU per scrape
    by_number = {_gauge(b, "memgap_collections_total"): _gauge(b, "memgap_collection_seconds") for b in new.bodies}
    later = [cpu for number, cpu in by_number.items() if number > 1]
    ages = [_gauge(b, "memgap_collection_age_seconds") for b in new.bodies]
    print(f"collection CPU, old path: {old_cpu * 1000:.0f} ms per scrape (server CPU / scrapes)")
    print(f"collection CPU, new path: {statistics.median(later) * 1000 if later else float('nan'):.0f} ms median "
          f"per collection, as served ({', '.join(f'{v * 1000:.0f}' for v in later)}; the first, at start: "
          f"{by_number.get(1.0, float('nan')) * 1000:.0f}); server CPU over the run {new_cpu * 1000:.0f} ms for "
          f"{int(max(by_number)) - 1} collections and {len(new.walls)} scrapes")
    print(f"age of the collection served (new path): median {statistics.median(ages):.1f} s, max {max(ages):.1f} s")
    print(f"start to serving (the first read included): old {old.started:.2f} s, new {new.started:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--scrapes", type=int, default=30)
    parser.add_argument("--hold-mib", type=int, default=20)
    parser.add_argument("--refresh", type=float, default=10.0, help="the new path's --refresh (10: its default)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    tree = subprocess.Popen([sys.executable, "-c", TREE, str(args.workers), str(args.hold_mib)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    servers: list[_Served] = []
    try:
        assert tree.stdout is not None and tree.stdout.readline() == "ready\n"
        servers = [_Served(tree.pid, 0, env), _Served(tree.pid, args.refresh, env)]
        old, new = servers
        for _ in range(args.scrapes):
            old.scrape()
            new.scrape()
        body = old.bodies[-1]
        procs = len(re.findall(r"^memgap_rss_bytes\{", body, re.M))
        rss = sum(int(float(v)) for v in re.findall(r"^memgap_rss_bytes\{[^}]*\} (\S+)$", body, re.M))
        print(f"tree: {procs} processes (master + {args.workers} workers), RSS sum {rss / 2**20:.0f} MiB; "
              f"{os.cpu_count()} CPUs; Python {sys.version.split()[0]}; load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print("scrape latency over HTTP, ms:")
        _report("old (--refresh 0)", old)
        _report(f"new (--refresh {args.refresh:g})", new)
        _cpu_figures(old, new)
        med = statistics.median(new.walls[1:])
        print(f"goal: a scrape of a {args.workers}-worker tree under 100 ms: "
              f"{'met' if med < 0.1 else 'MISSED'} ({med * 1000:.1f} ms, median over HTTP, new path)", flush=True)
    finally:
        for served in servers:
            served.close()
        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()


if __name__ == "__main__":
    main()
