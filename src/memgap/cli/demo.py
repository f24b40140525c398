"""Run a field-report scenario under `memgap run` and explain it.

  memgap demo              the thread-pool decode of seed 000
  memgap demo --list       the scenarios
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from memgap.cli import _common
from memgap.cli._common import record_folder, run_and_report
from memgap.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default="threadpool", help="scenario name (threadpool)")
    p.add_argument("--list", action="store_true", help="list the scenarios")
    p.add_argument("--json", metavar="FILE", type=_common.output_file, help="write the run as JSON")
    p.add_argument("--interval", type=_common.seconds, default=0.1, metavar="S", help="as for memgap run (0.1)")
    p.add_argument("--walk", action="store_true", help="as for memgap run")


@dataclass(frozen=True)
class DemoRequest:
    """``memgap demo``'s options: a scenario this memgap has (unless the scenarios are only listed)."""

    name: str = "threadpool"
    list_scenarios: bool = False
    json: str | None = None
    interval: float = 0.1
    walk: bool = False

    def __post_init__(self) -> None:
        from memgap.scenarios import SCENARIOS

        if not self.list_scenarios and self.name not in SCENARIOS:
            raise UsageError(f"no scenario {self.name!r}; choose from {', '.join(SCENARIOS)}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoRequest:
        return cls(name=args.name, list_scenarios=args.list, json=args.json, interval=args.interval, walk=args.walk)


def main(args: argparse.Namespace) -> int:
    return execute(DemoRequest.from_args(args))


def execute(request: DemoRequest) -> int:
    from memgap.record.recorder import RunOptions
    from memgap.scenarios import SCENARIOS, scenario_command

    if request.list_scenarios:
        for name, info in SCENARIOS.items():
            print(f"{name:<14} seed {info.seed}  {info.summary}")
        return 0
    info = SCENARIOS[request.name]
    print(f"memgap demo: {info.name} (seed {info.seed}): {info.summary}", file=sys.stderr)
    options = RunOptions(scenario_command(request.name), record_folder(request.json), request.interval, request.walk)
    return run_and_report(options, request.json)
