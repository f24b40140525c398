"""What one scrape of `memgap serve-metrics --tree MASTER` costs on a 16-worker tree.

    PYTHONPATH=src python benchmarks/bench_scrape_tree.py [--workers 16] [--scrapes 30] [--hold-mib 20]

A master (plain Python, no memgap) builds ``--hold-mib`` MiB of Python objects and a bytes
buffer of the same size, then forks ``--workers`` workers that each build as much again of
their own and sleep (idle, as gunicorn's sync workers between requests). `memgap
serve-metrics --tree MASTER --port 0` serves the tree; /metrics is fetched over loopback
``--scrapes`` times in a row. Printed: the first scrape apart (it reads every process's
smaps for the first time), then the median and range of the others, timed around the HTTP
request, beside the server's own ``memgap_scrape_duration_seconds`` of each scrape.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--scrapes", type=int, default=30)
    parser.add_argument("--hold-mib", type=int, default=20)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    tree = subprocess.Popen([sys.executable, "-c", TREE, str(args.workers), str(args.hold_mib)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    server = None
    try:
        assert tree.stdout is not None and tree.stdout.readline() == "ready\n"
        server = subprocess.Popen([sys.executable, "-m", "memgap", "serve-metrics", "--tree", str(tree.pid),
                                   "--port", "0", "--address", "127.0.0.1"], stdout=subprocess.PIPE, text=True,
                                  env=env)
        assert server.stdout is not None
        line = server.stdout.readline()
        url = re.match(r"memgap: serving (\S+) ", line)
        assert url, line
        walls, own, procs = [], [], 0
        cpu_first = _cpu(server.pid)
        for n in range(args.scrapes):
            if n == 1:
                cpu_first, cpu_rest = _cpu(server.pid) - cpu_first, _cpu(server.pid)
            began = time.perf_counter()
            with urllib.request.urlopen(url.group(1), timeout=60) as resp:
                body = resp.read().decode()
            walls.append(time.perf_counter() - began)
            own.append(float(re.search(r"^memgap_scrape_duration_seconds (\S+)$", body, re.M).group(1)))
            procs = len(re.findall(r"^memgap_rss_bytes\{", body, re.M))
        cpu_rest = (_cpu(server.pid) - cpu_rest) / (args.scrapes - 1)
        rss = sum(int(float(v)) for v in re.findall(r"^memgap_rss_bytes\{[^}]*\} (\S+)$", body, re.M))
        print(f"tree: {procs} processes (master + {args.workers} workers), RSS sum {rss / 2**20:.0f} MiB; "
              f"{os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
        print(f"{'':22} {'HTTP ms':>7}  {'server ms':>9}")
        print(f"{'first scrape':22} {_ms(walls[0])}  {_ms(own[0]):>9}")
        for name, values in (("HTTP ms", walls[1:]), ("server ms", own[1:])):
            print(f"next {len(values)}, {name:9}: median {_ms(statistics.median(values))} "
                  f"({_ms(min(values)).strip()}-{_ms(max(values)).strip()})")
        print(f"server CPU (user + system) per scrape: first {cpu_first * 1000:.0f} ms, "
              f"next {args.scrapes - 1} {cpu_rest * 1000:.0f} ms on average (what a scrape costs on an idle core)")
        med = statistics.median(walls[1:])
        print(f"goal: a scrape of a {args.workers}-worker tree under 100 ms: "
              f"{'met' if med < 0.1 else 'MISSED'} ({med * 1000:.1f} ms, median over HTTP)")
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()


if __name__ == "__main__":
    main()
