"""Explain memgap's own process (a quick check that memgap works here).

Takes an in-process snapshot of the memgap command itself.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from memgap.api import snapshot
from memgap.cli import _common
from memgap.cli._common import write_json
from memgap.report.terminal import render_snapshot


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", type=_common.output_file,
                   help="write the snapshot as JSON ('-' for stdout)")


@dataclass(frozen=True)
class SnapshotRequest:
    """``memgap snapshot``'s one option."""

    json: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SnapshotRequest:
        return cls(json=args.json)


def main(args: argparse.Namespace) -> int:
    return execute(SnapshotRequest.from_args(args))


def execute(request: SnapshotRequest) -> int:
    snap = snapshot(walk=True)
    if request.json:
        write_json(snap.to_dict(regions=False), request.json)
    if request.json != "-":
        render_snapshot(snap, sys.stdout)
    return 0
