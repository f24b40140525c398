"""`memgap run` of a Python program that does not import memgap: its exit is read from outside while its
bootstrap holds it (before its interpreter's shutdown, and after its atexit handlers), so memgap's snapshot
machinery is never loaded into it; a program that uses memgap's API keeps its exit snapshots in-process."""
import json
import os
import sys

from conftest import HERE
from helpers import memgap, run_recorded
from memgap.record.idle import rss_slack

PROGRAM = os.path.join(HERE, "programs", "exits_plain.py")


def _own(path):
    with open(path) as fh:
        lines = dict(line.rstrip("\n").split(" ", 1) for line in fh)
    return int(lines["rss"]), lines["modules"].split()


def test_an_unmodified_programs_exit_is_read_from_outside_and_no_snapshot_machinery_loads_in_it(tmp_path):
    own = tmp_path / "own.txt"
    _, run = run_recorded(tmp_path, [sys.executable, PROGRAM, str(own)])
    rss, modules = _own(own)
    # the bootstrap alone: no snapshot, no source reader, no document in the program
    assert "memgap.api" not in modules and not [m for m in modules if m.startswith(("memgap.explain",
                                                                                   "memgap.sources",
                                                                                   "memgap.allocators"))], modules
    (process,) = [p for p in run["processes"] if p["snapshots"]]
    at_exit = {s["phase"]: s for s in process["snapshots"] if s["phase"] in ("before-exit", "exit")}
    assert set(at_exit) == {"before-exit", "exit"}, [s["phase"] for s in process["snapshots"]]
    for snap in at_exit.values():
        assert snap["route"] == "outside" and snap["held_exit"], (snap["phase"], snap["route"])
        assert "same_read_as" not in snap, "its atexit handler runs between them: two reads"
    # its own reading came between the two reads (its atexit handler): all three alike, 40 MB kept
    for snap in at_exit.values():
        assert abs(snap["rss"] - rss) <= rss_slack(rss), (snap["phase"], snap["rss"], rss)
    assert rss >= 40_000_000, rss
    assert process["idle"]["rule"] == "before exit", process["idle"]


def test_a_program_that_marks_phases_keeps_its_exit_in_process(tmp_path):
    script = tmp_path / "marks.py"
    script.write_text("import memgap\nkept = [bytes(1000) for _ in range(10_000)]\nmemgap.phase('built')\n")
    _, run = run_recorded(tmp_path, [sys.executable, str(script)])
    (process,) = [p for p in run["processes"] if p["snapshots"]]
    routes = {s["phase"]: s["route"] for s in process["snapshots"]}
    assert routes == {"built": "in-process", "before-exit": "in-process", "exit": "in-process"}, routes


def test_a_python_child_that_passed_through_is_let_go_once(tmp_path):
    """A short Python command a script runs (its parent is not memgap, it lives under an interval): its exit is
    let go unread at its first hold, and its second (after its atexit handlers) is not judged or said again."""
    out = tmp_path / "run.json"
    script = f'{sys.executable} -c "import os; print(\'child\', os.getpid())"; sleep 0.3'
    # an interval no short child outlives under a suite's load (with 0.5 s one did in a fresh clone: read, not
    # passed, and nothing was let go)
    proc = memgap("run", "--interval", "5", "--json", str(out), "--", "/bin/sh", "-c", script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    child = int(next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("child ")))
    with open(tmp_path / "run.json.d" / "samples.jsonl") as fh:
        events = [json.loads(line) for line in fh]
    passed = [e for e in events if e.get("type") == "passed" and e.get("pid") == child]
    assert len(passed) == 1, passed
    entry = next(p for p in json.loads(out.read_text())["processes"] if p["pid"] == child)
    assert not [s for s in entry["snapshots"] if s["phase"] in ("before-exit", "exit")], entry["snapshots"]


def _exits(tmp_path, source):
    script = tmp_path / "prog.py"
    script.write_text(source)
    _, run = run_recorded(tmp_path, [sys.executable, str(script)])
    (process,) = [p for p in run["processes"] if p["snapshots"]]
    return {s["phase"]: s for s in process["snapshots"] if s["phase"] in ("before-exit", "exit")}


def test_one_read_stands_for_both_exits_where_nothing_of_the_program_runs_between(tmp_path):
    """No thread but the main one and no atexit handler of the program's: its exit snapshot (after atexit's
    handlers) is its before-exit read, said so; a daemon thread still running, or an atexit handler the
    program registered, gets a read of its own."""
    alone = _exits(tmp_path, "kept = [bytes(1000) for _ in range(20_000)]\n")
    assert alone["exit"]["same_read_as"] == "before-exit" and "same_read_as" not in alone["before-exit"]
    assert alone["exit"]["rss"] == alone["before-exit"]["rss"] and alone["exit"]["held_exit"]
    assert alone["exit"]["read_started"] == alone["before-exit"]["read_started"]  # one read
    threaded = _exits(tmp_path, "import threading, time\nkept = [bytes(1000) for _ in range(20_000)]\n"
                                "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    handler = _exits(tmp_path, "import atexit\nkept = bytearray(b'x') * 30_000_000\n"
                               "atexit.register(kept.clear)\n")
    for two in (threaded, handler):
        assert set(two) == {"before-exit", "exit"} and not [s for s in two.values() if "same_read_as" in s]
        assert two["exit"]["read_started"] > two["before-exit"]["read_started"]
    assert handler["exit"]["rss"] < handler["before-exit"]["rss"] - 20_000_000  # its handler freed 30 MB
