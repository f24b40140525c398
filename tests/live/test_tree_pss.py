"""A tree summed by PSS, and shared vs private per layer (issue 15, items 1-2).

The target (programs/forked_tree.py, in its hold mode) does not import memgap: a master holds about 50 MiB
of small Python objects, two forked workers keep them copy-on-write and each fill 24 MiB
of their own. Each process writes its own VmRSS and smaps_rollup Pss (read from
/proc/self) when sent SIGUSR1: the witness is the kernel's figure as the process reads it,
taken right after memgap's snapshot of it, while it rests.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import HERE, child_env
from helpers import MiB, memgap
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

PROGRAM = os.path.join(HERE, "programs", "forked_tree.py")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """(master pid, [master, worker, worker] pids, readings file) of a resting forked tree."""
    readings = tmp_path_factory.mktemp("tree") / "readings.txt"
    proc = subprocess.Popen([sys.executable, PROGRAM, str(readings), "hold"], stdout=subprocess.PIPE, text=True,
                            env=child_env(), start_new_session=True)
    pids = [int(proc.stdout.readline().split()[1]) for _ in range(3)]
    assert proc.pid in pids, pids
    yield proc.pid, [proc.pid, *sorted(p for p in pids if p != proc.pid)], str(readings)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def own_reading(pid, readings):
    """The process's own (RSS, PSS, USS), asked for now: the last line it wrote for its PID."""
    def lines():
        if not os.path.exists(readings):
            return []
        with open(readings) as fh:
            return [[int(w) for w in line.split()] for line in fh if line.endswith("\n")]
    before = len(lines())
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [row[1:] for row in lines()[before:] if row[0] == pid]
        if found:
            return found[-1]
        time.sleep(0.02)
    raise AssertionError(f"PID {pid} wrote no reading")


def test_layers_pss_adds_up_to_each_process_pss(tree):
    _master, pids, readings = tree
    for pid in pids:
        own_reading(pid, readings)  # once first: the handler's own first run touches pages
        snap = snapshot_pid(pid, SnapshotOptions(regions=False))
        _, own_pss, _ = own_reading(pid, readings)
        layers = snap.layers.values()
        assert all(layer.pss is not None for layer in layers if layer.resident is not None), snap.layers
        total = sum(layer.pss for layer in layers if layer.pss is not None)
        assert abs(total - own_pss) <= 0.02 * own_pss, (pid, total / MiB, own_pss / MiB)
        # the snapshot's own remainder is what the layers leave of smaps_rollup's Pss
        assert total + snap.pss_unexplained == snap.status["Pss"]
        for layer in layers:
            if layer.resident is not None:
                assert layer.private + layer.shared == layer.resident and 0 <= layer.private <= layer.resident
                assert layer.private <= layer.pss + 4096 and layer.pss <= layer.resident + 4096, layer


def test_worker_private_buffer_and_shared_objects(tree):
    master, pids, _ = tree
    for pid in pids[1:]:
        snap = snapshot_pid(pid, SnapshotOptions(regions=False))
        # the 24 MiB bytearray is one glibc mmapped chunk: allocator_in_use, not other_anon
        in_use, other = snap.layers["allocator_in_use"], snap.layers["other_anon"]
        assert in_use.private >= 24 * MiB, (in_use.private / MiB, other.private / MiB)
        assert other.private < 4 * MiB
        # the master's 50 MiB of objects, inherited: shared with the master and the other worker
        objects = snap.layers["python_objects"]
        assert objects.resident >= 40 * MiB
        assert objects.shared >= 0.9 * objects.resident, (objects.shared / MiB, objects.resident / MiB)
        assert objects.pss <= 0.45 * objects.resident, (objects.pss / MiB, objects.resident / MiB)
    master_snap = snapshot_pid(master, SnapshotOptions(regions=False))
    assert master_snap.layers["allocator_in_use"].private < 8 * MiB  # no 24 MiB buffer of its own


def test_tree_is_summed_by_pss(tree):
    master, pids, readings = tree
    for pid in pids:
        own_reading(pid, readings)
    proc = memgap("inspect", str(master), "--tree", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    own = {pid: own_reading(pid, readings) for pid in pids}
    own_pss, own_rss = sum(r[1] for r in own.values()), sum(r[0] for r in own.values())
    assert sorted(p["pid"] for p in doc["processes"]) == sorted(pids)
    assert abs(doc["total_pss"] - own_pss) <= 0.05 * own_pss, (doc["total_pss"] / MiB, own_pss / MiB)
    assert doc["total_pss"] < 0.65 * own_rss, (doc["total_pss"] / MiB, own_rss / MiB)
    totals = doc["totals"]
    assert totals["layers_by"] == "pss"
    # the layers summed by PSS over the tree, without the remainder they leave, make the same total
    layered = sum(v for v in totals["layers"].values() if v is not None)
    assert abs(layered - own_pss) <= 0.05 * own_pss, (layered / MiB, own_pss / MiB)
    assert abs(totals["unexplained"]) <= 0.02 * own_pss, totals
    # the terminal heading says the same total, and what the RSS sum is
    text = memgap("inspect", str(master), "--tree").stdout
    heading = text.splitlines()[0]
    assert heading.startswith("3 processes: PSS "), text
    shown = float(heading.split("PSS ")[1].split()[0]) * MiB
    assert abs(shown - own_pss) <= 0.05 * own_pss, (heading, own_pss / MiB)
    assert "counts shared pages once per process" in " ".join(text.split())


def test_a_tree_read_at_once_has_every_process_and_what_each_copied(tree):
    """snapshot_tree (inspect --tree and top --tree): the master first, then each worker, with
    the census its own snapshot reads (headers taken from the master's read where the frame is
    the same) and what it copied from the master."""
    import memgap.explain.tree
    from memgap.sources.pymalloc_pools import TreeHeaders

    made = []

    class Kept(TreeHeaders):
        def __init__(self):
            super().__init__()
            made.append(self)

    master, pids, _readings = tree
    memgap.explain.tree.TreeHeaders, original = Kept, memgap.explain.tree.TreeHeaders
    try:
        snaps = memgap.explain.tree.snapshot_tree(master).processes
    finally:
        memgap.explain.tree.TreeHeaders = original
    assert snaps[0].pid == master and sorted(s.pid for s in snaps) == sorted(pids)
    for snap in snaps:  # the workers rest: their objects stay where they are between the two reads
        alone = snapshot_pid(snap.pid, SnapshotOptions(regions=False)).layers["python_objects"].detail
        assert snap.layers["python_objects"].detail == alone and snap.regions == [], snap.pid
        if snap.pid != master:
            assert snap.copied_from_parent.parent == master and snap.copied_from_parent.copied > 0
    # the workers keep the master's objects shared: as root (tests/README.md), most of their
    # headers came from the master's read, the same frames
    assert os.geteuid() == 0 and made[0].frames is True
    workers_pools = sum(s.layers["python_objects"].detail["pools_read"] for s in snaps if s.pid != master)
    assert made[0].reused >= workers_pools // 2, (made[0].reused, workers_pools)
