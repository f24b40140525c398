"""Run a field-report scenario under `memgap run` and explain it.

  memgap demo              the thread-pool decode of seed 000
  memgap demo --list       the scenarios
"""
from __future__ import annotations

import argparse
import sys

from . import _common
from ._common import run_and_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default="threadpool", help="scenario name (threadpool)")
    p.add_argument("--list", action="store_true", help="list the scenarios")
    p.add_argument("--json", metavar="FILE", help="write the run as JSON")
    p.add_argument("--interval", type=_common.seconds, default=0.1, metavar="S", help="as for memgap run (0.1)")
    p.add_argument("--walk", action="store_true", help="as for memgap run")


def main(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..scenarios import SCENARIOS, scenario_command

    if args.list:
        for name, info in SCENARIOS.items():
            print(f"{name:<14} seed {info.seed}  {info.summary}")
        return 0
    if args.name not in SCENARIOS:
        raise UsageError(f"no scenario {args.name!r}; choose from {', '.join(SCENARIOS)}")
    info = SCENARIOS[args.name]
    print(f"memgap demo: {info.name} (seed {info.seed}): {info.summary}", file=sys.stderr)
    return run_and_report(scenario_command(args.name), args.interval, args.json, walk=args.walk)
