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

from memgap.cli import _common
from memgap.cli._common import write_json, write_lab
from memgap.documents.fields import parse_json
from memgap.documents.records import LabDocument, RunDocument, load_document
from memgap.errors import MalformedInput, UsageError
from memgap.lab.journal import LAB_EVENTS, is_lab_folder, rebuild
from memgap.record.assemble import load_run
from memgap.record.recording import SAMPLES_FILE
from memgap.report.run import render_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a `memgap run` recording folder (FILE.d), a `memgap lab` folder (--dir), "
                                "or the JSON of a run or a lab")
    p.add_argument("--json", metavar="FILE", type=_common.output_file, help="write the assembled document as JSON")
    p.add_argument("--html", metavar="FILE", help="a lab: write its HTML report")
    p.add_argument("--markdown", metavar="FILE", help="a lab: write its variants table as Markdown")



def _load(path: str) -> RunDocument | LabDocument:
    if os.path.isdir(path):
        if is_lab_folder(path):
            return rebuild(path)
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
