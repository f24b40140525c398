"""The documents as classes (memgap.documents.records): saved documents of earlier versions load,
current ones round-trip, and bad input is memgap's error (documents made live, and `memgap report`
on a bad one: tests/live/test_documents_live.py).

The saved documents (tests/fixtures/documents/COMMIT/) were written by memgap at that commit:
04f183d (the lab's first weeks: a run without ``start``, ``agent``, ``cgroup``... and processes
without ``idle``; a lab without ``material``, ``cgroup``, ``warnings``...), 8a6ec88 (the
version before these classes: its agent's trim at idle says ``by``, not ``route``; its lab's
variants lack ``tree``, its recommendation ``kubernetes``) and b87b24e (the version before the
lab's summaries were classes: a sweep of two cells, two repetitions, a recommendation).
"""
from __future__ import annotations

import glob
import json
import os

import pytest

from conftest import HERE
from memgap.documents.lab_summary import AcrossCell, Cell, Recommendation, SweepRow, VariantSummary
from memgap.documents.records import (
    LabDocument,
    ProcessRecord,
    RunDocument,
    RunFigures,
    RunStatus,
    TrimMode,
    TrimRecord,
    TrimRoute,
    load_document,
)
from memgap.errors import MalformedInput

SAVED = os.path.join(HERE, "fixtures", "documents")
OLD, CURRENT, NEW = (os.path.join(SAVED, commit) for commit in ("04f183d", "8a6ec88", "b87b24e"))
LABS = sorted(glob.glob(os.path.join(SAVED, "*", "lab*.json")))


def read(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def as_json(doc):
    """What a document's to_dict writes, read back (tuples become lists, as in a file)."""
    return json.loads(json.dumps(doc.to_dict()))


def test_every_saved_document_loads():
    paths = sorted(glob.glob(os.path.join(SAVED, "*", "*.json")))
    assert len(paths) == 7 and len(LABS) == 3, paths
    for path in paths:
        doc = load_document(read(path), path)
        assert isinstance(doc, LabDocument if os.path.basename(path).startswith("lab") else RunDocument), path


@pytest.mark.parametrize("path", [os.path.join(CURRENT, "run-agent-trim.json"),
                                  os.path.join(CURRENT, "run-trimmer.json"), os.path.join(NEW, "lab-sweep.json")])
def test_a_current_document_round_trips(path):
    data = read(path)
    assert as_json(load_document(data)) == data


def test_a_current_lab_is_written_back_byte_for_byte():
    """The lab that b87b24e wrote (its summaries dicts then), read into the classes and written
    as ``memgap lab --json`` writes (cli._common.write_json): the same bytes."""
    with open(os.path.join(NEW, "lab-sweep.json"), encoding="utf-8") as fh:
        text = fh.read()
    lab = LabDocument.from_dict(json.loads(text))
    assert json.dumps(lab.to_dict(), indent=1, default=str) + "\n" == text
    # what it holds, so that every class is read from it
    assert len(lab.cells) == 2 and lab.recommendation and len(lab.across_cells) == 2 and len(lab.sweep) == 2
    assert all(isinstance(v, VariantSummary) for c in lab.cells for v in c.variants)
    assert isinstance(lab.cells[0], Cell) and isinstance(lab.recommendation, Recommendation)
    assert isinstance(lab.sweep["glibc"][1], SweepRow) and isinstance(lab.across_cells[0], AcrossCell)
    assert lab.variants[0].idle is not None and isinstance(lab.variants[0].idle[0], float)  # a median of two
    assert lab.variants == next(c for c in lab.cells if c.params == lab.cell).variants  # the worst cell's


@pytest.mark.parametrize("path", LABS, ids=lambda p: os.path.relpath(p, SAVED))
def test_every_saved_lab_round_trips_through_its_classes(path):
    lab = LabDocument.from_dict(read(path), path)
    assert LabDocument.from_dict(lab.to_dict()) == lab
    assert LabDocument.from_dict(as_json(lab)) == lab
    assert all(isinstance(v, VariantSummary) for v in lab.variants)
    assert all(isinstance(v, VariantSummary) for c in lab.cells for v in c.variants)
    assert lab.recommendation is None or isinstance(lab.recommendation, Recommendation)
    words = [v.word(lab.recommendation.variant if lab.recommendation else None, lab.baseline) for v in lab.variants]
    assert words and all(words)


def _filled(data, variant=None, cell=None, recommendation=None):
    """A saved lab as loading it writes it back: ``variant`` added to each variant's summary,
    ``cell`` to each cell, ``recommendation`` to each recommendation."""
    def rec(r):
        return {**r, **(recommendation or {})} if r else r

    def summaries(vs):
        return [{**v, **(variant or {})} for v in vs]

    return {**data, "variants": summaries(data["variants"]), "recommendation": rec(data["recommendation"]),
            "cells": [{**c, "variants": summaries(c["variants"]), "recommendation": rec(c["recommendation"]),
                       **(cell or {})} for c in data["cells"]]}


def test_a_lab_of_8a6ec88_loads_with_what_it_lacks_filled_in():
    data = read(os.path.join(CURRENT, "lab.json"))
    assert as_json(LabDocument.from_dict(data)) == _filled(data, {"tree": False}, recommendation={"kubernetes": ""})


# What a document of 04f183d lacks, and what loading it fills in.
RUN_FILLED = {"start": None, "stopped_at_idle": False, "load_seconds": None, "oom_kills": None, "cgroup": None,
              "agent": {}}
LAB_FILLED = {"material": {}, "stopped": "", "time_spread": 0.0, "across_cells": [], "adaptive": False,
              "dropped": [], "warnings": [], "cgroup": {}}
LAB_VARIANT_FILLED = {"cgroup_peak": None, "tree": False}
LAB_CELL_FILLED = {"time_spread": 0.0}
LAB_RUN_FILLED = {"duration": 0.0, "post_rest": None, "timeline": [], "layers": [], "python": False, "idle_rule": "",
                  "process": "", "processes": 0, "tree": [], "process_idle": None, "tree_how": "",
                  "cgroup_peak": None, "cgroup_limit": None}


@pytest.mark.parametrize("name", ["run.json", "run-trim-at-idle.json"])
def test_an_earlier_run_loads_with_what_it_lacks_filled_in(name):
    data = read(os.path.join(OLD, name))
    out = as_json(RunDocument.from_dict(data))
    assert {k: out[k] for k in set(out) - set(data)} == RUN_FILLED
    for before, after in zip(data["processes"], out.pop("processes"), strict=True):
        assert after == {**before, "idle": None}  # the idle load_run finds: the lab finds it again
    assert out == {k: v for k, v in data.items() if k != "processes"} | RUN_FILLED


def test_an_earlier_lab_loads_with_what_it_lacks_filled_in():
    data = read(os.path.join(OLD, "lab.json"))
    out = as_json(LabDocument.from_dict(data))
    assert {k: out[k] for k in set(out) - set(data)} == LAB_FILLED
    assert list(out.pop("runs")) == [{**r, **LAB_RUN_FILLED} for r in data["runs"]]
    filled = _filled(data, LAB_VARIANT_FILLED, LAB_CELL_FILLED)
    assert out == {k: v for k, v in filled.items() if k != "runs"} | LAB_FILLED


def test_the_trim_records_of_each_version():
    """The trims kept in the saved runs: in-process (04f183d), the agent's ``by`` read as its route,
    the trimmer's; each written back as it was, but ``by``, which becomes ``route``."""
    in_process = _process(read(os.path.join(OLD, "run-trim-at-idle.json"))).trims_at_marks()
    assert [t.route for t in in_process] == [TrimRoute.IN_PROCESS] and in_process[0].released > 0
    agent = _process(read(os.path.join(CURRENT, "run-agent-trim.json"))).trims_at_marks()
    (record,) = agent
    saved = next(s["trim"] for p in read(os.path.join(CURRENT, "run-agent-trim.json"))["processes"]
                 for s in p["snapshots"] if s.get("trim"))
    assert record.route is TrimRoute.AGENT and "by" in saved
    assert record.to_dict() == {**{k: v for k, v in saved.items() if k != "by"}, "route": "agent"}
    trimmer = _process(read(os.path.join(CURRENT, "run-trimmer.json")))
    assert trimmer.trims and all(t.route is TrimRoute.TRIMMER for t in trimmer.trims)
    assert trimmer.trims[0].released == trimmer.trims[0].rss_before - trimmer.trims[0].rss_after
    assert all(t.started is None and t.cpu is None for t in trimmer.trims)  # saved before the trims were timed
    timed = TrimRecord(100, 40, TrimRoute.TRIMMER, time=12.5, started=12.25, cpu=0.03)
    assert timed.to_dict() == {"time": 12.5, "rss_before": 100, "rss_after": 40, "started": 12.25, "cpu": 0.03}
    assert TrimRecord.from_dict(timed.to_dict()) == timed


def _process(data):
    """The process of a saved run that has trims (a snapshot after a trim, or the trimmer's)."""
    run = RunDocument.from_dict(data)
    return next(p for p in run.processes if p.trims or p.trims_at_marks())


def test_a_gdb_trim_record_keeps_what_its_route_adds():
    record = TrimRecord(100, 40, TrimRoute.GDB, seconds=0.01, details={
        "call": "malloc_trim(0)", "returned": 1, "estimate": 50, "estimate_complete": True,
        "estimate_route": "outside", "estimate_rss": 100, "gdb_seconds": {"attach": 0.2}, "notes": []})
    data = record.to_dict()
    assert data["route"] == "gdb" and data["released"] == 60
    assert TrimRecord.from_dict(data) == record


def test_the_lab_folders_runs_load():
    with open(os.path.join(CURRENT, "lab-folder", "lab.jsonl")) as fh:
        events = [json.loads(line) for line in fh]
    runs = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "run"]
    assert runs and all(as_json(RunFigures.from_dict(r)) == r for r in runs)


RUN = {"schema": "memgap.run/1", "cmd": ["x"], "processes": [{"pid": 1, "snapshots": []}]}
LAB_RUN = {"variant": "glibc", "rep": 1, "order": 1, "status": "ok"}
LAB = {"schema": "memgap.lab/1", "cmd": ["x"], "runs": []}
VARIANT = {"spec": "glibc", "cost": 0, "settings": 0, "runs": 1, "ok": 1}
CELL = {"params": {"N": "1"}, "variants": [VARIANT], "verdict": "", "recommendation": None, "baseline_idle": 0}


@pytest.mark.parametrize("make,data,says", [
    (RunDocument.from_dict, {k: v for k, v in RUN.items() if k != "processes"}, "no field 'processes'"),
    (RunDocument.from_dict, {**RUN, "processes": {}}, "dict where list"),
    (RunDocument.from_dict, {**RUN, "processes": [{"snapshots": []}]}, "no field 'pid'"),
    (RunDocument.from_dict, {**RUN, "exit_code": "0"}, "field 'exit_code': str"),
    (RunDocument.from_dict, {**RUN, "schema": "memgap.run/2"}, "this memgap reads memgap.run/1"),
    (RunDocument.from_dict, {**RUN, "schema": "memgap.lab/1"}, "not a memgap.run document"),
    (RunDocument.from_dict, {k: v for k, v in RUN.items() if k != "schema"}, "schema None"),
    (RunDocument.from_dict, [RUN], "list where dict"),
    # what a run keeps as JSON (memgap.documents.recorded's TypedDicts) is checked key by key all the same
    (RunDocument.from_dict, {**RUN, "timeline": [{"t": 0.1, "pid": 1}]}, "field 'timeline'[0]: no field 'rss'"),
    (RunDocument.from_dict, {**RUN, "timeline": [{"t": 0.1, "pid": 1, "rss": "1"}]},
     "field 'timeline'[0], field 'rss': str where int belongs"),
    (RunDocument.from_dict, {**RUN, "findings": [{"code": "c", "severity": "info"}]}, "no field 'summary'"),
    (RunDocument.from_dict, {**RUN, "processes": [{"pid": 1, "snapshots": [], "exit": {"time": 1.0, "by": "agent",
                                                                                      "gap": "0.1"}}]},
     "field 'exit', field 'gap': str where"),
    (RunDocument.from_dict, {**RUN, "tree": {"processes": 2}}, "field 'tree': no field 'pids'"),
    (LabDocument.from_dict, {**LAB, "material": {"share": 0.05}}, "field 'material': no field 'share' or 'bytes'"),
    (RunFigures.from_dict, {k: v for k, v in LAB_RUN.items() if k != "status"}, "no field 'status'"),
    (RunFigures.from_dict, {**LAB_RUN, "rep": True}, "bool where int"),
    (RunFigures.from_dict, {**LAB_RUN, "status": "fine"}, "'fine' is not one of ok, crashed"),
    (LabDocument.from_dict, {"schema": "memgap.lab/1", "cmd": ["x"], "runs": [{**LAB_RUN, "wall": "1"}]},
     "field 'wall': str"),
    (LabDocument.from_dict, {"schema": "memgap.lab/0", "cmd": ["x"], "runs": []}, "this memgap reads memgap.lab/1"),
    (TrimRecord.from_dict, {"performed": True, "rss_before": 1}, "no field 'rss_after'"),
    (TrimRecord.from_dict, {"rss_before": 1, "rss_after": 1, "route": "ssh"}, "'ssh' is not one of"),
    (ProcessRecord.from_dict, {"pid": 1, "snapshots": [], "trims": [{"time": 1.0, "rss_before": "1", "rss_after": 1}]},
     "field 'rss_before': str"),
    (load_document, {"schema": "memgap.snapshot/1"}, "not a memgap run or lab"),
    # the lab's summaries: each names the field, and the item of a list or the key of a dict
    (LabDocument.from_dict, {**LAB, "variants": [VARIANT, "glibc"]}, "field 'variants'[1]: str where dict belongs"),
    (LabDocument.from_dict, {**LAB, "variants": {"glibc": VARIANT}}, "field 'variants': dict where list belongs"),
    (LabDocument.from_dict, {**LAB, "variants": [{k: v for k, v in VARIANT.items() if k != "spec"}]},
     "field 'variants'[0]: no field 'spec'"),
    (LabDocument.from_dict, {**LAB, "variants": [{**VARIANT, "idle": "1"}]},
     "field 'variants'[0], field 'idle': str where tuple belongs"),
    (LabDocument.from_dict, {**LAB, "variants": [{**VARIANT, "idle": [1, 2]}]}, "field 'idle': list where tuple"),
    (LabDocument.from_dict, {**LAB, "variants": [{**VARIANT, "statuses": {"ok": "1"}}]},
     "field 'statuses'['ok']: str where int belongs"),
    (VariantSummary.from_dict, {**VARIANT, "better": 1}, "variant summary, field 'better': int where bool belongs"),
    (LabDocument.from_dict, {**LAB, "recommendation": {"reason": "r"}}, "field 'recommendation': no field 'variant'"),
    (LabDocument.from_dict, {**LAB, "recommendation": ["glibc"]}, "field 'recommendation': list where dict"),
    (LabDocument.from_dict, {**LAB, "recommendation": {"variant": "glibc", "reason": "", "notes": "n"}},
     "field 'recommendation', field 'notes': str where list belongs"),
    (LabDocument.from_dict, {**LAB, "cells": [{k: v for k, v in CELL.items() if k != "recommendation"}]},
     "field 'cells'[0]: no field 'recommendation'"),
    (LabDocument.from_dict, {**LAB, "cells": [{**CELL, "variants": [VARIANT, 3]}]},
     "field 'cells'[0], field 'variants'[1]: int where dict belongs"),
    (LabDocument.from_dict, {**LAB, "cells": [{**CELL, "baseline_idle": None}]},
     "field 'baseline_idle': NoneType where float belongs"),
    (LabDocument.from_dict, {**LAB, "sweep": {"glibc": [{"params": {}, "idle": "1", "peak": None}]}},
     "field 'sweep'['glibc'][0], field 'idle': str where float belongs"),
    (LabDocument.from_dict, {**LAB, "sweep": {"glibc": [{"params": {}, "idle": 1}]}}, "no field 'peak'"),
    (LabDocument.from_dict, {**LAB, "across_cells": [{"params": {}, "word": 1, "idle": None, "baseline_idle": None}]},
     "field 'across_cells'[0], field 'word': int where str belongs"),
    # figures built in Python (no parser to refuse them first): never negative, infinite or NaN
    (RunFigures.from_dict, {**LAB_RUN, "wall": float("inf")}, "field 'wall': inf is not a finite number"),
    (RunFigures.from_dict, {**LAB_RUN, "cpu": float("nan")}, "field 'cpu': nan is not a finite number"),
    (RunFigures.from_dict, {**LAB_RUN, "peak": -5}, "field 'peak': -5 is negative"),
    (LabDocument.from_dict, {**LAB, "variants": [{**VARIANT, "idle": [1.0, -2.0, 3.0]}]},
     "field 'variants'[0], field 'idle': -2.0 is negative"),
    (LabDocument.from_dict, {**LAB, "variants": [{**VARIANT, "statuses": {"ok": -1}}]},
     "field 'statuses'['ok']: -1 is negative"),
    (ProcessRecord.from_dict, {"pid": 1, "snapshots": [], "trims": [{"time": 1.0, "rss_before": -1, "rss_after": 1}]},
     "field 'rss_before': -1 is negative"),
    (RunDocument.from_dict, {**RUN, "duration": float("-inf")}, "field 'duration': -inf is not a finite number"),
])
def test_bad_input_is_memgaps_own_error(make, data, says):
    with pytest.raises(MalformedInput) as caught:
        make(data)
    assert caught.value.exit_code == 6 and says in str(caught.value), str(caught.value)


def test_figures_that_may_be_negative_still_read():
    """A difference or an exit status below 0 is a figure memgap writes: a run killed by a signal, a
    trim after which VmRSS grew, a sweep's shrinking growth, layers above RSS (unexplained)."""
    from memgap.documents.snapshot import Snapshot

    assert RunDocument.from_dict({**RUN, "exit_code": -9, "metrics": {"delta": -1.5}}).exit_code == -9
    assert RunFigures.from_dict({**LAB_RUN, "exit_code": -9, "trim_released": -4096}).trim_released == -4096
    assert TrimRecord.from_dict({"rss_before": 1, "rss_after": 2, "released": -1}).released == -1
    assert SweepRow.from_dict({"params": {}, "idle": 1.0, "peak": 2.0, "idle_growth": -0.5}).idle_growth == -0.5
    snap = {"pid": 1, "time": 1.0, "rss": 10, "layers": {}, "unexplained": -3, "allocator": {}, "pss_unexplained": -1}
    assert Snapshot.from_dict(snap).unexplained == -3
    with pytest.raises(MalformedInput, match="field 'rss': -10 is negative"):
        Snapshot.from_dict({**snap, "rss": -10})
    # a process's exit read by the sampler a little before its last snapshot's own clock (a fresh clone:
    # gap -0.0008 s), and a program's own metric below 0
    exit_record = {"time": 2.0, "by": "sampled", "last_snapshot": 2.0008, "gap": -0.0008}
    process = {"pid": 1, "snapshots": [], "exit": exit_record}
    assert ProcessRecord.from_dict(process).exit["gap"] == -0.0008
    with pytest.raises(MalformedInput, match="field 'held': -1 is negative"):
        ProcessRecord.from_dict({**process, "exit": {**exit_record, "held": -1}})


def test_the_words_are_their_values_in_json_and_text():
    assert json.dumps({RunStatus.OOM_KILLED: [TrimRoute.AGENT]}) == '{"oom-killed": ["agent"]}'
    assert f"{RunStatus.NO_IDLE} {TrimRoute.IN_PROCESS:>11}" == "no-idle  in-process"
    assert [TrimMode.of(s) for s in ("", "idle", "quiet", "every:5")] == [None, TrimMode.IDLE, TrimMode.QUIET,
                                                                          TrimMode.EVERY]
