"""How steady the pytest plugin's retained figure is from one run to the next.

A CI limit (``@pytest.mark.memgap_retained("50 MiB")``) is only usable when the figure it
compares moves less between runs than the leaks it is meant to catch. This runs one test
file, unchanged, REPS times in fresh pytest processes (``--memgap``: every test measured)
and prints each test's live bytes and RSS left behind, as medians and ranges over the runs.

The tests are the shapes a suite has: one that does nothing; one that fills a cache once
(measured after a warm-up run); one that keeps 20 MiB for good (a leak: its figure must
stand well clear of the others' spread); one that makes and drops 50 MiB of small
objects (no live bytes; what the allocators keep of it shows in RSS, as it would in a
long-lived process); one that makes and drops 64 MiB in large buffers (glibc gives mmapped
chunks back).

    python benchmarks/bench_pytest_plugin_spread.py [REPS]
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile

TESTS = '''
import pytest

KEPT = []
CACHE = {}

def test_nothing():
    pass

@pytest.mark.memgap_retained("1 GiB", warmup=1)
def test_cache_filled_once():
    if not CACHE:
        CACHE.update((i, str(i) * 10) for i in range(200_000))

def test_keeps_20_mib():
    KEPT.append(bytearray(20 << 20))

def test_small_objects_made_and_dropped():
    junk = [str(i) * 4 for i in range(500_000)]
    del junk

def test_large_buffers_made_and_dropped():
    junk = [bytearray(1 << 20) for _ in range(64)]
    del junk
'''

LINE = re.compile(r"^\s*(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+\S+::(\w+)")


def one_run(path: str) -> dict[str, tuple[float, float]]:
    """(live MiB, RSS MiB) per test in one fresh pytest process."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--memgap", path],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-2000:])
    found = {m.group(4): (float(m.group(1)), float(m.group(2))) for m in map(LINE.match, proc.stdout.splitlines())
             if m}
    if len(found) != TESTS.count("def test_"):
        raise SystemExit("could not read the summary:\n" + proc.stdout[-3000:])
    return found


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "test_shapes.py")
        with open(path, "w") as fh:
            fh.write(TESTS)
        runs = [one_run(path) for _ in range(reps)]
    print(f"left behind per test over {reps} fresh pytest runs (MiB): median [min, max]")
    for name in runs[0]:
        for i, what in enumerate(("live", "RSS")):
            values = [r[name][i] for r in runs]
            print(f"  {name:40} {what:4} {statistics.median(values):7.2f} [{min(values):.2f}, {max(values):.2f}]"
                  f"  spread {max(values) - min(values):.2f}")
    print(f"load average: {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
