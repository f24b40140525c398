"""Show a recording again: a `memgap run` folder (complete or cut short), a lab's JSON or a lab's folder.

  memgap report run.json.d            the run's tables, from its recording folder
  memgap report run.json.d --json out.json
  memgap report lab.json --html lab.html
  memgap report LAB_DIR               a lab rebuilt from the runs its folder recorded (lab.jsonl)
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from memgap.allocators.catalog import CATALOGUE, PRELOADABLE, find_library
from memgap.allocators.variants import parse_variant
from memgap.cli import _common
from memgap.cli._common import write_json, write_lab
from memgap.documents.fields import parse_json
from memgap.documents.records import LabDocument, RunDocument, RunFigures, load_document
from memgap.errors import MalformedInput, UsageError
from memgap.lab.runner import LAB_EVENTS, LabOptions, lab_document
from memgap.record.recorder import SAMPLES_FILE, load_run
from memgap.record.recording import read_events
from memgap.report.run import render_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a `memgap run` recording folder (FILE.d), a `memgap lab` folder (--dir), "
                                "or the JSON of a run or a lab")
    p.add_argument("--json", metavar="FILE", type=_common.output_file, help="write the assembled document as JSON")
    p.add_argument("--html", metavar="FILE", help="a lab: write its HTML report")
    p.add_argument("--markdown", metavar="FILE", help="a lab: write its variants table as Markdown")



def _load(path: str) -> RunDocument | LabDocument:
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, LAB_EVENTS)):
            return _lab_from_folder(path)
        if not os.path.exists(os.path.join(path, SAMPLES_FILE)):
            raise UsageError(f"{path} is neither a memgap run recording (no {SAMPLES_FILE}) nor a lab's "
                             f"folder (no {LAB_EVENTS})")
        return load_run(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not UTF-8
        raise MalformedInput(path, f"not JSON ({exc})") from None
    return load_document(parse_json(text, path), path)  # checked, and what an earlier version lacks filled in


def _lab_from_folder(path: str) -> LabDocument:
    """The lab document again, from the header and runs in its folder: the only record of a
    lab run without --json, or killed before it wrote it. The folder keeps neither the
    slowdown budget nor the lab's own time: the default budget and the runs' time stand in."""
    where = os.path.join(path, LAB_EVENTS)
    events = list(read_events(where))
    header = next((e for e in events if e.get("type") == "header"), None)
    if header is None:
        raise MalformedInput(where, "no header line")
    runs = [RunFigures.from_dict(e, f"{where}, run") for e in events if e.get("type") == "run"]
    try:
        variants = [parse_variant(spec) for spec in header["variants"]]
        cmd, reps = header["cmd"], int(header["reps"])
        chosen = dict(header.get("chosen") or {})
        for event in (e for e in events if e.get("type") == "chosen"):  # what the baseline's findings added
            chosen.update(event["chosen"])
            at = next((i for i, v in enumerate(variants) if v.is_baseline), 0) + 1  # as the lab put them
            variants[at:at] = [parse_variant(spec) for spec in event["added"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedInput(where, f"not a lab's header and runs ({exc!r})") from None
    for v in variants:  # the preload the recommendation prints: where this machine has the library
        if v.allocator in PRELOADABLE:
            v.library = find_library(v.allocator) or CATALOGUE[v.allocator].library
    options = LabOptions(cmd, variants, reps, lab_dir=path,
                         skipped=list(header.get("skipped", [])), params=_swept(runs),
                         memory_limit=header.get("memory_limit"))
    options.chosen = chosen  # as the lab said (a lab of an earlier memgap said nothing)
    missing = len(runs) < _planned(options, runs)
    lab = lab_document(options, runs, sum(r.duration for r in runs), interrupted=missing)
    lab.machine = header.get("machine", lab.machine)
    lab.warnings.insert(0, f"rebuilt from {LAB_EVENTS}, which keeps neither --max-slowdown nor the lab's own time: "
                              f"the verdict takes the default {options.max_slowdown:.0%} budget, and the lab's time "
                              "is its runs' (its --json keeps both)")
    return lab


def _swept(runs: list[RunFigures]) -> list[tuple[str, list[str]]]:
    """The swept parameters and their values, in the order the runs met them."""
    grid: dict[str, list[str]] = {}
    for r in runs:
        for name, value in r.params.items():
            if value not in grid.setdefault(name, []):
                grid[name].append(value)
    return list(grid.items())


def _planned(options: LabOptions, runs: list[RunFigures]) -> int:
    """How many runs a finished lab has: pymalloc variants are skipped for a program that is not Python."""
    not_python = any(r.layers for r in runs) and not any(r.python for r in runs)
    variants = [v for v in options.variants if not (not_python and v.python_only)]
    return len(variants) * options.reps * len(options.cells())


@dataclass(frozen=True)
class ReportRequest:
    """``memgap report``'s options. Whether --html and --markdown apply depends on what PATH holds
    (a lab's results), so that check waits until it is read."""

    path: str
    json: str | None = None
    html: str | None = None
    markdown: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReportRequest:
        return cls(path=args.path, json=args.json, html=args.html, markdown=args.markdown)


def main(args: argparse.Namespace) -> int:
    return execute(ReportRequest.from_args(args))


def execute(request: ReportRequest) -> int:
    doc = _load(request.path)
    if isinstance(doc, LabDocument):
        write_lab(doc, request.json, request.html, request.markdown)
        return 0
    if request.html or request.markdown:
        raise UsageError("--html and --markdown are for a lab's results")
    if request.json:
        write_json(doc.to_dict(), request.json)
    if request.json != "-":
        render_run(doc, sys.stdout)
    return 0
