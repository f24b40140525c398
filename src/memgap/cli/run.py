"""Run a command and explain its memory over time.

Samples the command's process tree (RSS of every process) at --interval and
reads each process from outside, whatever its language: at its peak, its
quiet spells and its exit (memgap's preloaded agent, or in a Python child a
bootstrap on PYTHONPATH, holds the exit for that read; the program is not
changed). A Python program that calls memgap.phase() records a snapshot of
itself at each, and at its exit. Prints the breakdown of the process with the
highest peak, at its peak and at idle, and every other process in one line.

  memgap run --json out.json -- python my_service.py
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, NamedTuple

from memgap.cli import _common
from memgap.cli._common import record_folder, run_and_report
from memgap.errors import UsageError

if TYPE_CHECKING:  # the recorder is loaded when the run starts
    from memgap.record.recorder import RunOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=_common.seconds, default=0.1, metavar="S", help="seconds between samples (0.1)")
    p.add_argument("--json", metavar="FILE", type=_common.output_file,
                   help="write the run as JSON; FILE.d/ keeps the raw recording")
    p.add_argument("--walk", action="store_true",
                   help="phase snapshots also walk the gc for large buffers (bytes, numpy arrays) so they count "
                        "as Python objects, a Python child's exit snapshots too (taken in it, not read from "
                        "outside); costs time and memory in proportion to the objects")
    p.add_argument("--phase-regex", metavar="REGEX", default="", type=_common.regex,
                   help="lines of the command's stdout that mark a phase (group 1 names it); the process is "
                        "read from outside at each")
    p.add_argument("--no-agent", action="store_true",
                   help="do not preload memgap's native agent (it serves allocator statistics of non-Python "
                        "processes and stays dormant in Python ones) nor hold any exit for a read from outside "
                        "(a Python child then snapshots its exit in itself)")
    p.add_argument("--load", type=_common.command, default=[], metavar="CMD",
                   help="for a service that does not exit by itself: once it is up, run this load command (one "
                        "string) against it, wait --rest seconds of quiet, then stop it")
    p.add_argument("--rest", type=_common.seconds, default=3.0, metavar="S",
                   help="with --load: seconds the service rests after the load before it is stopped (3)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")


class RunRequest(NamedTuple):
    """``memgap run``'s options: the command and how to record it (memgap.record.recorder.RunOptions, built by
    ``run_options`` once the recording's folder is known), and where the run's JSON goes. A named tuple where
    the other commands' requests are frozen dataclasses: it is made before the command starts, and
    dataclasses' import (inspect with it) delayed that by 0.02 s."""

    cmd: tuple[str, ...]
    interval: float = 0.1
    json: str | None = None
    walk: bool = False
    phase_regex: str = ""
    agent: bool = True
    load: tuple[str, ...] = ()
    rest: float = 3.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunRequest:
        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise UsageError("no command given: memgap run [options] -- CMD ...")
        return cls(cmd=tuple(cmd), interval=args.interval, json=args.json, walk=args.walk,
                   phase_regex=args.phase_regex, agent=not args.no_agent, load=tuple(args.load), rest=args.rest)

    def run_options(self, record_dir: str) -> RunOptions:
        from memgap.record.recorder import RunOptions

        return RunOptions(list(self.cmd), record_dir, self.interval, self.walk, mark_regex=self.phase_regex,
                          agent=self.agent, load=list(self.load), rest=self.rest, outside_exits=True)


def main(args: argparse.Namespace) -> int:
    return execute(RunRequest.from_args(args))


def execute(request: RunRequest) -> int:
    return run_and_report(request.run_options(record_folder(request.json)), request.json)
