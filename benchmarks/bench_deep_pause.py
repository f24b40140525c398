"""How long `memgap inspect --deep` stalls a busy Python process (issue 23, item 5).

The target: a Python program (not importing memgap) whose 6 threads churn objects without pause
while one more thread ticks every 2 ms and keeps the longest gap between two ticks. Per round,
`memgap inspect PID --deep --json -` (gdb attaches, calls malloc_info and runs memgap's snapshot
inside the process); the target's longest gap during the round is the stall it saw. Rounds
without an attach, interleaved, give the target's own jitter (its threads fight for the GIL).

    python benchmarks/bench_deep_pause.py [--rounds 20] [--threads 6] [--vs OTHER_SRC]

With --vs, each round also runs the memgap whose package is in OTHER_SRC (an older checkout's src/),
interleaved, so a change is measured against what it changed on the same loaded machine.

Prints a line per round as it goes (the jitter round, then per memgap the stall, the longest time
every thread of the target was stopped at once, read from /proc every 2 ms, gdb's attach and how
long gdb held the process, and the load average), then the medians and max over the rounds. A
jitter round lasts as long as the last inspect did (a longer window holds longer gaps). Goal
(issue 23): the stall's median and max under 0.5 s.

The stall is the longest gap between two ticks, the one still open when asked included: asked just
after gdb let go, the ticker may not have run yet, and a gap not yet closed would be missed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

TARGET = r"""
import sys, threading, time

def churn():
    while True:
        kept = [{"k": i, "v": [i] * 8} for i in range(2000)]
        del kept

longest = 0.0
last = time.monotonic()
lock = threading.Lock()

def tick():
    global longest, last
    while True:
        time.sleep(0.002)
        with lock:
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now

for _ in range(int(sys.argv[1])):
    threading.Thread(target=churn, daemon=True).start()
threading.Thread(target=tick, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:  # each line: the longest gap since the last line (the open one too), then again
    with lock:
        print(f"{max(longest, time.monotonic() - last):.4f}", flush=True)
        longest = 0.0
"""


def _gap(target: subprocess.Popen[str]) -> float:
    assert target.stdin is not None and target.stdout is not None
    target.stdin.write("\n")
    target.stdin.flush()
    return float(target.stdout.readline())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--vs", metavar="OTHER_SRC", help="another memgap's src/ folder, run in turn")
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    sources = {"this": os.path.join(here, "..", "src"), **({"other": args.vs} if args.vs else {})}
    target = subprocess.Popen([sys.executable, "-c", TARGET, str(args.threads)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert target.stdout is not None and target.stdout.readline() == "ready\n"
    figures: dict[str, dict[str, list[float]]] = {name: {what: [] for what in FIGURES} for name in sources}
    jitter: list[float] = []
    loads: list[float] = []
    window = 1.0  # the jitter round lasts as long as the last inspect did: a longer window has longer gaps
    try:
        time.sleep(1)
        for number in range(1, args.rounds + 1):
            _gap(target)
            time.sleep(window)
            jitter.append(_gap(target))
            words = [f"round {number:2}: jitter {jitter[-1]:.3f} s over {window:.1f} s"]
            for name, src in sorted(sources.items(), reverse=number % 2 == 0):  # each goes first in turn
                by = figures[name]
                window = _round(target, src, by)
                words.append(f"{name}: stall {by['stall under --deep'][-1]:.3f} all stopped "
                             f"{by['all threads stopped'][-1]:.3f} attach {_last(by['gdb attach'])} "
                             f"held {_last(by['gdb held'])}")
            loads.append(os.getloadavg()[0])
            print(" | ".join(words) + f" | load {loads[-1]:.1f}", flush=True)
    finally:
        target.kill()
        target.wait()
    print(f"{args.rounds} rounds, {args.threads} churning threads, load average {statistics.median(loads):.1f} "
          f"(median; {min(loads):.1f}-{max(loads):.1f})")
    _line("jitter without", jitter)
    for name, by in figures.items():
        for what, values in by.items():
            _line(f"{what} ({name})", values)
    stalls = figures["this"]["stall under --deep"]
    met = bool(stalls) and statistics.median(stalls) < 0.5 and max(stalls) < 0.5
    print(f"goal stall < 0.5 s (this): {'met' if met else 'missed'}")
    return 0


FIGURES = ("stall under --deep", "all threads stopped", "gdb attach", "gdb held")


def _last(values: list[float]) -> str:
    return f"{values[-1]:.3f}" if values else "-"


def _round(target: subprocess.Popen[str], src: str, into: dict[str, list[float]]) -> float:
    """One `inspect --deep` by the memgap in ``src``: the target's longest gap meanwhile, the longest
    time all its threads were stopped at once, gdb's timings; returns how long the inspect took."""
    _gap(target)
    poller = StopPoller(target.pid)
    poller.start()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "memgap", "inspect", str(target.pid), "--deep", "--json", "-"],
                          env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    into["stall under --deep"].append(_gap(target))
    poller.done = True
    poller.join()
    into["all threads stopped"].append(poller.longest)
    if done.returncode != 0:
        print("inspect failed:", done.stderr.strip().splitlines()[-1:], file=sys.stderr)
        return took
    seconds = json.loads(done.stdout)["deep"]["gdb_seconds"]
    into["gdb attach"].append(seconds.get("attach", 0.0))
    into["gdb held"].append(seconds.get("held", 0.0))
    return took


class StopPoller(threading.Thread):
    """The longest span over which every thread of ``pid`` was in a tracing stop (state t), read
    from /proc every 2 ms: what gdb's stops cost the target apart from the machine's load."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.done, self.longest = pid, False, 0.0

    def run(self) -> None:
        since = None
        while not self.done:
            now, states = time.monotonic(), []
            for task in os.listdir(f"/proc/{self.pid}/task"):
                try:
                    with open(f"/proc/{self.pid}/task/{task}/stat") as fh:
                        states.append(fh.read().rsplit(")", 1)[1].split()[0])
                except OSError:
                    continue
            if states and all(state == "t" for state in states):
                since = now if since is None else since
                self.longest = max(self.longest, now - since)
            else:
                since = None
            time.sleep(0.002)


def _line(name: str, values: list[float]) -> None:
    if values:
        print(f"{name:<28} median {statistics.median(values):.3f} s  max {max(values):.3f} s  "
              f"over 0.5 s: {sum(v > 0.5 for v in values)}")


if __name__ == "__main__":
    sys.exit(main())
