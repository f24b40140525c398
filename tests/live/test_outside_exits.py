"""`memgap run` of a Python program that does not import memgap: its exit is read from outside while its
bootstrap holds it (before its interpreter's shutdown, and after its atexit handlers), so memgap's snapshot
machinery is never loaded into it; a program that uses memgap's API keeps its exit snapshots in-process."""
import os
import sys

from conftest import HERE
from helpers import run_recorded
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
