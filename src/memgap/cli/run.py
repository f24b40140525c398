"""Run a command and explain its memory over time.

Samples the command's process tree (RSS of every process) at --interval, and
makes Python children record an in-process snapshot at each memgap.phase()
and at exit, through a bootstrap on PYTHONPATH (the program is not changed).
Prints the phase table of each process and the final breakdown.

  memgap run --json out.json -- python my_service.py
"""
from __future__ import annotations

import argparse

from . import _common
from ._common import run_and_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=_common.seconds, default=0.1, metavar="S", help="seconds between samples (0.1)")
    p.add_argument("--json", metavar="FILE", help="write the run as JSON; FILE.d/ keeps the raw recording")
    p.add_argument("--walk", action="store_true",
                   help="phase snapshots also walk the gc for large buffers (bytes, numpy arrays) so they count "
                        "as Python objects; costs time and memory in proportion to the objects")
    p.add_argument("--phase-regex", metavar="REGEX", default="",
                   help="lines of the command's stdout that mark a phase (group 1 names it); the process is "
                        "read from outside at each")
    p.add_argument("--no-agent", action="store_true",
                   help="do not preload memgap's native agent (it serves allocator statistics of non-Python "
                        "processes and stays dormant in Python ones)")
    p.add_argument("--load", type=_common.command, default=[], metavar="CMD",
                   help="for a service that does not exit by itself: once it is up, run this load command (one "
                        "string) against it, wait --rest seconds of quiet, then stop it")
    p.add_argument("--rest", type=_common.seconds, default=3.0, metavar="S",
                   help="with --load: seconds the service rests after the load before it is stopped (3)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")


def main(args: argparse.Namespace) -> int:
    return run_and_report(list(args.cmd), args.interval, args.json, walk=args.walk, phase_regex=args.phase_regex,
                          agent=not args.no_agent, load=args.load, rest=args.rest)

