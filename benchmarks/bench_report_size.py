"""What `memgap report` costs on large recordings: time and peak memory against the recording's size.

    PYTHONPATH=src python benchmarks/bench_report_size.py [--sizes 10,40,200] [--reps 1]

A real small recording is made first (`memgap run` of a Python program that allocates 30 MiB,
forks a child that allocates 20 more, and exits): its events are the stock. A synthetic recording
of each size (MB) is then written from it: processes cloned under new PIDs, each with its
`process` event, a sample every 0.1 s for 60 s, and peak reads and snapshots copied from the real
ones, until the folder holds that many megabytes (samples.jsonl, plus a process-PID.jsonl for one
process in ten, as a Python child writes its phases). Then `memgap report FOLDER --json OUT` runs as
a subprocess; its wall time and its peak RSS (``ru_maxrss`` from ``os.wait4``) are printed per size,
with the ratios per MB, which stay flat where the report is linear in its input.

It also runs the inputs the issue named: a recording whose command line holds one 2 MB and one
8 MB string, and one with a 2 MB phase name: memgap refuses a string field over 1 MiB (one line,
exit code 6) without reading the rest, and the time to say so is printed; and a phase name of
1 MB, under the limit, shown (its table cell wrapped) in time linear in its length.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
PROGRAM = ("import os, time\n"
           "kept = [bytearray(1 << 20) for _ in range(30)]\n"
           "time.sleep(0.6)\n"
           "if os.fork() == 0:\n"
           "    more = [bytearray(1 << 20) for _ in range(20)]\n"
           "    time.sleep(0.4)\n"
           "    os._exit(0)\n"
           "os.wait()\n"
           "time.sleep(0.3)\n")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def real_recording(where: str) -> list[dict[str, Any]]:
    """The events of a real small recording (`memgap run` of PROGRAM)."""
    out = os.path.join(where, "real.json")
    subprocess.run([sys.executable, "-m", "memgap", "run", "--interval", "0.05", "--json", out, "--",
                    sys.executable, "-c", PROGRAM], env=_env(), check=True, stdout=subprocess.DEVNULL)
    with open(f"{out}.d/samples.jsonl") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def synthetic(folder: str, stock: list[dict[str, Any]], megabytes: float) -> None:
    """A recording folder of about ``megabytes`` MB cloned from ``stock`` (see the docstring)."""
    os.makedirs(folder)
    header = next(e for e in stock if e["type"] == "header")
    reads = [e for e in stock if e["type"] in ("snapshot", "peak")]
    target, written, pid = megabytes * 1e6, 0, 100000
    with open(os.path.join(folder, "samples.jsonl"), "w") as fh:
        fh.write(json.dumps(header) + "\n")
        while written < target:
            pid += 1
            lines = [{"type": "process", "pid": pid, "ppid": 100000, "cmd": ["python", "-c", f"work {pid}"],
                      "t": 0.0}]
            lines += [{"type": "sample", "t": round(k * 0.1, 4), "pid": pid, "rss": (40 + k % 7) << 20,
                       "anon": 30 << 20, "file": 10 << 20, "threads": 1} for k in range(600)]
            for k, read in enumerate(reads[:12]):
                lines.append({**read, "pid": pid, "t": round(k * 5.0, 4)})
            lines.append({"type": "gone", "pid": pid, "t": 60.0})
            text = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in lines)
            fh.write(text)
            written += len(text)
            if pid % 10 == 0:  # a Python child's own phases
                with open(os.path.join(folder, f"process-{pid}.jsonl"), "w") as own:
                    for k, read in enumerate(reads[:4]):
                        snap = {**read["snapshot"], "phase": f"step-{k}"}
                        own.write(json.dumps({"type": "snapshot", "pid": pid, "snapshot": snap}) + "\n")
        fh.write(json.dumps({"type": "end", "t": 60.0, "exit_code": 0}) + "\n")


def folder_size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))


def report(folder: str) -> tuple[int, float, int, str]:
    """`memgap report FOLDER --json OUT`: (exit code, wall seconds, peak RSS bytes, last stderr line)."""
    out = folder + ".report.json"
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "memgap", "report", folder, "--json", out], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    return os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss * 1024, (err.strip().splitlines() or [""])[-1]


def big_strings(where: str, stock: list[dict[str, Any]]) -> None:
    header = next(e for e in stock if e["type"] == "header")
    cases = {"cmd-2MB": {"cmd": ["python", "x" * 2_000_000]}, "cmd-8MB": {"cmd": ["python", "x" * 8_000_000]}}
    for name, change in cases.items():
        folder = os.path.join(where, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "samples.jsonl"), "w") as fh:
            fh.write(json.dumps({**header, **change}) + "\n")
        _refused(name, folder)
    read = next(e for e in stock if e["type"] == "snapshot")
    for name, length in (("phase-1MB", 1_000_000), ("phase-2MB", 2_000_000)):  # under the limit, and over it
        folder = os.path.join(where, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "samples.jsonl"), "w") as fh:
            fh.write(json.dumps(header) + "\n")
            fh.write(json.dumps({**read, "snapshot": {**read["snapshot"], "phase": "p" * length}}) + "\n")
        _refused(name, folder)


def _refused(name: str, folder: str) -> None:
    code, wall, peak, line = report(folder)
    print(f"{name:9}  {folder_size(folder) / 1e6:5.1f} MB  exit {code}  {wall:5.2f} s  {peak / 2**20:6.1f} MiB  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,40,200", help="recording sizes in MB, comma-separated")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the recordings (their folder is printed)")
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="memgap-bench-report-")
    try:
        stock = real_recording(where)
        print(f"stock: {len(stock)} events of a real recording; {sys.version.split()[0]}, {os.cpu_count()} cpus")
        print(f"{'size':>8}  {'MB':>7}  exit  {'wall s':>6}  {'peak MiB':>8}  {'s/MB':>6}  {'MiB peak/MB':>11}")
        for size in (float(s) for s in args.sizes.split(",")):
            folder = os.path.join(where, f"rec-{size:g}")
            synthetic(folder, stock, size)
            mb = folder_size(folder) / 1e6
            for _ in range(args.reps):
                code, wall, peak, line = report(folder)
                print(f"{size:>8g}  {mb:7.1f}  {code:>4}  {wall:6.2f}  {peak / 2**20:8.1f}  {wall / mb:6.3f}  "
                      f"{peak / 2**20 / mb:11.3f}" + (f"  {line}" if code else ""))
            if not args.keep:
                shutil.rmtree(folder)
                os.remove(folder + ".report.json") if os.path.exists(folder + ".report.json") else None
        big_strings(where, stock)
    finally:
        if args.keep:
            print(f"kept in {where}")
        else:
            shutil.rmtree(where)


if __name__ == "__main__":
    main()
