"""Explain memgap's own process (a quick check that memgap works here).

Takes an in-process snapshot of the memgap command itself.
"""
from __future__ import annotations

import argparse
import sys

from ..api import snapshot
from ..report.terminal import render_snapshot
from ._common import write_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", help="write the snapshot as JSON ('-' for stdout)")


def main(args: argparse.Namespace) -> int:
    snap = snapshot(walk=True)
    if args.json:
        write_json(snap.to_dict(regions=False), args.json)
    if args.json != "-":
        render_snapshot(snap, sys.stdout)
    return 0
