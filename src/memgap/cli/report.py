"""Show a recording again: a `memgap run` folder (complete or cut short) or a lab's JSON.

  memgap report run.json.d            the run's tables, from its recording folder
  memgap report run.json.d --json out.json
  memgap report lab.json --html lab.html
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import MalformedInput, UsageError
from ..report.runs import render_run
from ..runs import SAMPLES_FILE, load_run
from ._output import write_json
from .lab import write_lab


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a `memgap run` recording folder (FILE.d), or the JSON of a run or a lab")
    p.add_argument("--json", metavar="FILE", help="write the assembled document as JSON")
    p.add_argument("--html", metavar="FILE", help="a lab: write its HTML report")
    p.add_argument("--markdown", metavar="FILE", help="a lab: write its variants table as Markdown")


def _load(path: str) -> dict:  # type: ignore[type-arg]
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, SAMPLES_FILE)):
            raise UsageError(f"{path} is not a memgap run recording (no {SAMPLES_FILE})")
        return load_run(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise MalformedInput(path, f"not JSON ({exc})") from None


def main(args: argparse.Namespace) -> int:
    doc = _load(args.path)
    schema = str(doc.get("schema", ""))
    if schema.startswith("memgap.lab/"):
        write_lab(doc, args.json, args.html, args.markdown)
    elif schema.startswith("memgap.run/"):
        if args.html or args.markdown:
            raise UsageError("--html and --markdown are for a lab's results")
        if args.json:
            write_json(doc, args.json)
        if args.json != "-":
            render_run(doc, sys.stdout)
    else:
        raise MalformedInput(args.path, f"not a memgap run or lab (schema {schema!r})")
    return 0
