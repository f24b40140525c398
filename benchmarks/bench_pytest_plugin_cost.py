"""What ``pytest --memgap`` costs on a real project's own test suite (issue 25: a plugin people leave on).

Fetches a project's source distribution from PyPI (``pip download --no-binary :all: --no-deps``,
into a temporary folder: nothing is kept), unpacks it and runs its tests in pairs, plainly
and with ``--memgap`` (every test measured), interleaved: A B A B, so that the machine's load
falls on both alike. Prints the wall time of each run, the median and range of each side,
their ratio, and whether any test failed with the plugin that passed without it.

    python benchmarks/bench_pytest_plugin_cost.py [PAIRS] [PROJECT] [TESTS]

Defaults: 5 pairs, toolz, its tests at toolz/tests. The goal: at most 1.25x the plain time,
no test failing only with the plugin.
"""
from __future__ import annotations

import glob
import os
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

GOAL = 1.25
# this checkout's plugin, whatever the folder the suite runs in (PYTHONPATH=src would be relative to it)
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def fetch(project: str, where: str) -> str:
    """The unpacked source distribution's folder."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                    "--dest", where, project], check=True)
    tarball = next(iter(glob.glob(os.path.join(where, "*.tar.gz"))))
    with tarfile.open(tarball) as tar:
        tar.extractall(where, filter="data")
    return tarball[:-len(".tar.gz")]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(folder: str, tests: str, memgap: bool) -> tuple[float, float, set[str], str]:
    """Wall and CPU seconds, the tests that failed or errored, and pytest's last line (with the
    plugin's own account of its readings)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", tests]
    started, cpu = time.perf_counter(), _children_cpu()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(command + (["--memgap"] if memgap else []), cwd=folder, capture_output=True,
                          text=True, timeout=1800, env=env)
    seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    lines = proc.stdout.strip().splitlines()
    failed = {m.group(1) for m in map(re.compile(r"^(?:FAILED|ERROR) (\S+)").match, lines) if m}
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pytest exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    own = re.search(r"^\d+ tests measured: .*$", proc.stdout, re.M)
    if memgap and own is None:
        raise SystemExit("no memgap summary: not this checkout's plugin?\n" + proc.stdout[-2000:])
    return seconds, cpu, failed, (lines[-1] if lines else "") + (f"; {own[0]}" if own else "")


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    project = sys.argv[2] if len(sys.argv) > 2 else "toolz"
    tests = sys.argv[3] if len(sys.argv) > 3 else f"{project}/tests"
    with tempfile.TemporaryDirectory() as where:
        folder = fetch(project, where)
        print(f"{os.path.basename(folder)}: {tests}, {pairs} interleaved pairs")
        plain: list[float] = []
        measured: list[float] = []
        cpu: dict[bool, list[float]] = {False: [], True: []}
        failed_plain: set[str] = set()
        failed_memgap: set[str] = set()
        for i in range(pairs):
            for memgap, times, failed in ((False, plain, failed_plain), (True, measured, failed_memgap)):
                seconds, cpu_seconds, fails, last = one_run(folder, tests, memgap)
                times.append(seconds)
                cpu[memgap].append(cpu_seconds)
                failed |= fails
                print(f"  pair {i + 1} {'--memgap' if memgap else 'plain   '} {seconds:6.2f} s "
                      f"(CPU {cpu_seconds:.2f} s)  {last}")
    ratio = statistics.median(measured) / statistics.median(plain)
    print(f"plain     {statistics.median(plain):.2f} s [{min(plain):.2f}, {max(plain):.2f}]")
    print(f"--memgap  {statistics.median(measured):.2f} s [{min(measured):.2f}, {max(measured):.2f}]")
    print(f"ratio of medians {ratio:.2f}x (goal <= {GOAL}x); per pair: "
          + ", ".join(f"{m / p:.2f}" for p, m in zip(plain, measured, strict=True)))
    print(f"CPU: plain {statistics.median(cpu[False]):.2f} s [{min(cpu[False]):.2f}, {max(cpu[False]):.2f}], "
          f"--memgap {statistics.median(cpu[True]):.2f} s [{min(cpu[True]):.2f}, {max(cpu[True]):.2f}]: "
          f"{statistics.median(cpu[True]) / statistics.median(cpu[False]):.2f}x")
    only = sorted(failed_memgap - failed_plain)
    print(f"tests failing only with --memgap: {only or 'none'}")
    print(f"load average: {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    if only or ratio > GOAL:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
