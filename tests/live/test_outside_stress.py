"""Reading a busy process from outside, again and again, never harms it."""
import subprocess
import sys

from conftest import child_env
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

BUSY = r"""
import sys, threading, zlib
from concurrent.futures import ThreadPoolExecutor
def work(i):
    blobs = [bytearray(zlib.compress(bytes(range(256)) * (64 + i % 64))) for _ in range(40)]
    return sum(len(b) for b in blobs[::3])
n = 0
with ThreadPoolExecutor(8) as pool:
    while True:
        total = sum(pool.map(work, range(64)))
        n += 1
        sys.stdout.write(f"{n} {total}\n"); sys.stdout.flush()
"""


def _state(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_a_hundred_snapshots_of_a_busy_process():
    proc = subprocess.Popen([sys.executable, "-c", BUSY], env=child_env(), stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline().split()
        expected_total = int(first[1])
        problems = 0
        for _ in range(100):
            snap = snapshot_pid(proc.pid, SnapshotOptions(regions=False))
            assert proc.poll() is None, "the target died"
            assert _state(proc.pid) != "T", "the target was left stopped"
            layers = [layer.resident for layer in snap.layers.values() if layer.resident is not None]
            assert sum(layers) + snap.unexplained == snap.rss
            problems += bool(snap.layers["allocator_free"].detail.get("problems"))
        # its output goes on, unchanged: the same work gives the same total every round
        lines = [proc.stdout.readline().split() for _ in range(3)]
        assert all(int(total) == expected_total for _, total in lines)
        numbers = [int(n) for n, _ in lines]
        assert numbers == list(range(numbers[0], numbers[0] + 3))
        # a walk that met a moving heap says so; most must be complete
        assert problems < 50
    finally:
        proc.kill()
        proc.wait()
