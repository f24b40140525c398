"""`memgap run` keeps sampling while it reads a process from outside: the reads are made beside the
sampler (memgap.record.outside), never in its way. A slow read is made as slow as the test wants,
with no timing to guess: programs/gated_reads.py runs memgap with its first read of the program held
until the test lets it go, which the test does only once it has seen samples of the program taken
after that read began (with the reads in the sampler's loop, none come, and the test fails).
The program read is programs/alloc_hold.c (4 MiB from malloc, until its stdin closes), which knows
nothing of memgap."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import HERE, child_env
from helpers import build_c

GATED = os.path.join(HERE, "programs", "gated_reads.py")
WAIT = 60  # seconds at most for what the test waits for (it never waits for a fixed time)


@pytest.fixture(scope="module")
def alloc_hold(tmp_path_factory):
    return build_c(tmp_path_factory, "alloc_hold", "-ldl")


def _until(what, check):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    pytest.fail(f"not within {WAIT} s: {what}")


def _events(record_dir):
    path = os.path.join(record_dir, "samples.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.endswith("\n")]


def _start(tmp_path, alloc_hold):
    gate, out = tmp_path / "gate", tmp_path / "run.json"
    gate.mkdir()
    proc = subprocess.Popen([sys.executable, GATED, str(gate), "alloc_hold", "run", "--interval", "0.05",
                             "--json", str(out), "--", alloc_hold], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    reading = gate / "reading"
    pid, began = _until("memgap began to read the program", lambda: reading.exists() and reading.read_text().split())
    pid, began = int(pid), float(began)
    record_dir = f"{out}.d"

    def sampled_since():
        start = next((e["start"] for e in _events(record_dir) if e["type"] == "header"), None)
        after = [e for e in _events(record_dir)
                 if start is not None and e["type"] == "sample" and e["pid"] == pid and start + e["t"] > began]
        return after if len(after) >= 3 else None

    _until("3 samples of the program while memgap reads it", sampled_since)
    return proc, gate, out, pid


def test_samples_go_on_while_a_read_from_outside_is_made(tmp_path, alloc_hold):
    proc, gate, out, pid = _start(tmp_path, alloc_hold)
    (gate / "go").touch()
    events = _events(f"{out}.d")
    start = next(e["start"] for e in events if e["type"] == "header")
    read = _until("the held read's event", lambda: next(
        (e["snapshot"] for e in _events(f"{out}.d") if e["type"] in ("peak", "snapshot") and e["pid"] == pid), None))
    _, err = proc.communicate(b"", timeout=WAIT)  # its stdin closed: the program exits
    assert proc.returncode == 0, err.decode()[-2000:]
    # the read recorded when it began and how long it took, and samples were taken in that span
    lo, hi = read["read_started"], read["read_started"] + read["read_seconds"]
    run = json.loads(out.read_text())
    inside = [s for s in run["timeline"] if s["pid"] == pid and lo < start + s["t"] < hi]
    assert len(inside) >= 3, (lo - start, hi - start, [s["t"] for s in run["timeline"] if s["pid"] == pid])
    assert read["asked"] <= read["read_started"]
    # its peak breakdown was taken, its layers adding up to its RSS then
    process = next(p for p in run["processes"] if p["pid"] == pid)
    peak = process["peak"]
    assert peak is not None
    assert sum(layer["resident"] or 0 for layer in peak["layers"].values()) + peak["unexplained"] == peak["rss"]
    assert not [e for e in run["errors"] if e.get("pid") == pid], run["errors"]


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_recording_loads_after_memgap_is_killed_mid_read(tmp_path, alloc_hold):
    from memgap.record.assemble import load_run

    proc, _gate, out, pid = _start(tmp_path, alloc_hold)
    memgaps = [c for c in _children(proc.pid) if c != pid]  # its reader and its watchdog
    proc.kill()
    proc.communicate(timeout=WAIT)
    _until("memgap's own processes and the program ended with memgap", lambda: all(map(_gone, [*memgaps, pid])))
    run = load_run(f"{out}.d")
    assert not run.complete
    assert len([s for s in run.timeline if s["pid"] == pid]) >= 3
    assert memgaps  # memgap had its reader (and its watchdog) as children
