"""Documents made live round-trip through their classes (memgap.documents.records): a run of a Python
program and its in-process trim, a lab of two variants, a shell script (not Python) trimmed by memgap's
agent at idle; and `memgap report` on a bad document says so in one line. The saved documents and
the classes on hand-made input: tests/unit/test_documents.py."""
from __future__ import annotations

import json
import sys

from conftest import child_env
from helpers import memgap, run_recorded
from memgap.documents.records import LabDocument, RunDocument, RunStatus, TrimRoute


def read(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def as_json(doc):
    """What a document's to_dict writes, read back (tuples become lists, as in a file)."""
    return json.loads(json.dumps(doc.to_dict()))


def test_a_live_run_and_its_in_process_trim_round_trip(tmp_path):
    prog = tmp_path / "work.py"
    prog.write_text("import memgap\nmemgap.phase('post-import')\nx = [bytes(500) for _ in range(40000)]\n"
                    "del x\nmemgap.phase('idle')\n")
    _, data = run_recorded(tmp_path, [sys.executable, str(prog)], MEMGAP_TRIM_AFTER="idle")
    run = RunDocument.from_dict(data)
    assert as_json(run) == data
    (proc,) = [p for p in run.processes if p.snapshots]
    (trim,) = proc.trims_at_marks()  # memgap.trim()'s record, as api.py writes it
    saved = next(s["trim"] for s in proc.snapshots if s.get("trim"))
    assert set(saved) == {"performed", "released", "rss_before", "rss_after", "seconds", "reason", "pymalloc_released"}
    assert trim.route is TrimRoute.IN_PROCESS and trim.to_dict() == saved


def test_a_live_lab_round_trips(tmp_path):
    prog = tmp_path / "work.py"
    prog.write_text("import memgap\nmemgap.phase('post-import')\nx = [bytes(500) for _ in range(40000)]\n"
                    "del x\nmemgap.phase('idle')\n")
    out = tmp_path / "lab.json"
    done = memgap("lab", "--variant", "glibc", "--variant", "glibc:trim=idle", "--reps", "1",
                  "--dir", str(tmp_path / "lab"), "--json", str(out), "--", sys.executable, str(prog))
    assert done.returncode == 0, done.stderr[-2000:]
    data = read(out)
    lab = LabDocument.from_dict(data)
    assert as_json(lab) == data
    assert [r.status for r in lab.runs] == [RunStatus.OK, RunStatus.OK]
    trimmed = next(r for r in lab.runs if r.variant == "glibc:trim=idle")
    assert trimmed.after_trim is not None and trimmed.idle == trimmed.after_trim


RUN = {"schema": "memgap.run/1", "cmd": ["x"], "processes": [{"pid": 1, "snapshots": []}]}


def test_memgap_report_says_so_in_one_line(tmp_path):
    bad = tmp_path / "run.json"
    bad.write_text(json.dumps({**RUN, "processes": [{"pid": "1", "snapshots": []}]}))
    done = memgap("report", str(bad))
    assert done.returncode == 6 and done.stderr.count("\n") == 1, done.stderr
    assert "field 'pid': str where int belongs" in done.stderr


def test_the_agents_trim_at_idle_is_recorded_with_its_route(tmp_path):
    """A program that is not Python, its idle marked on stdout: memgap reads it from outside and
    asks its agent to trim; the record says ``route`` (8a6ec88 wrote ``by``). It rests until the trim is
    recorded (30 s at most): a rest of 1 s ended before memgap's read of it, under a fresh clone's suite
    beside another."""
    script = tmp_path / "idle.sh"
    script.write_text('echo idle\nn=0\nwhile [ $n -lt 600 ] && ! grep -q \'"phase":"after-trim"\' '
                      '"$MEMGAP_RECORD_DIR/samples.jsonl"; do sleep 0.05; n=$((n + 1)); done\n')
    out = tmp_path / "run.json"
    done = memgap("run", "--phase-regex", "^(idle)$", "--json", str(out), "--", "/bin/sh", str(script),
                  env=child_env(MEMGAP_TRIM_AFTER="idle"))
    assert done.returncode == 0, done.stderr[-2000:]
    data = read(out)
    run = RunDocument.from_dict(data)
    assert as_json(run) == data
    (trim,) = [t for p in run.processes for t in p.trims_at_marks()]
    saved = next(s["trim"] for p in data["processes"] for s in p["snapshots"] if s.get("trim"))
    assert trim.route is TrimRoute.AGENT and saved["route"] == "agent" and "by" not in saved
    assert set(saved) == {"performed", "route", "rss_before", "rss_after", "released", "seconds", "reason"}


def test_a_recording_line_that_is_no_event_is_one_clear_error(tmp_path):
    """A real recording, then a line in it that is JSON but no object: one line naming it, exit code 6
    (it was an AttributeError's traceback)."""
    _, data = run_recorded(tmp_path, [sys.executable, "-c", "pass"])
    folder = tmp_path / "run.json.d"
    assert memgap("report", str(folder)).returncode == 0
    with open(folder / "samples.jsonl", "a") as fh:
        fh.write("[1, 2]\n" + json.dumps({"type": "gone", "pid": data["processes"][0]["pid"], "t": 9.0}) + "\n")
    done = memgap("report", str(folder))
    assert done.returncode == 6 and done.stderr.count("\n") == 1, done.stderr
    assert "a JSON list, not an event" in done.stderr and "samples.jsonl, line" in done.stderr
