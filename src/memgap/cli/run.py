"""Run a command and explain its memory over time.

Samples the command's process tree (RSS of every process) at --interval, and
makes Python children record an in-process snapshot at each memgap.phase()
and at exit, through a bootstrap on PYTHONPATH (the program is not changed).
Prints the phase table of each process and the final breakdown.

  memgap run --json out.json -- python my_service.py
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from ..errors import UsageError
from ..report.runs import render_run
from ..runs import SAMPLES_FILE, RunOptions, load_run, record_run
from . import _args
from ._output import write_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=_args.seconds, default=0.1, metavar="S", help="seconds between samples (0.1)")
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
    p.add_argument("--load", type=_args.command, default=[], metavar="CMD",
                   help="for a service that does not exit by itself: once it is up, run this load command (one "
                        "string) against it, wait --rest seconds of quiet, then stop it")
    p.add_argument("--rest", type=_args.seconds, default=3.0, metavar="S",
                   help="with --load: seconds the service rests after the load before it is stopped (3)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")


def run_and_report(cmd: list[str], interval: float, json_path: str | None, walk: bool = False,
                   phase_regex: str = "", agent: bool = True, load: list[str] | None = None,
                   rest: float = 3.0) -> int:
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command given: memgap run [options] -- CMD ...")
    record_dir = f"{json_path}.d" if json_path and json_path != "-" else tempfile.mkdtemp(prefix="memgap-run-")
    _replace_earlier(record_dir)
    try:
        code = record_run(RunOptions(cmd, record_dir, interval, walk, mark_regex=phase_regex, agent=agent,
                                     load=load or [], rest=rest))
    except KeyboardInterrupt:
        # Ctrl-C: the recording up to it is kept. Write and show it as for a run that ended (the
        # lab does the same), and say where it is: without --json, a temporary folder nobody was told of.
        _write_and_show(record_dir, json_path)
        print(f"memgap run: interrupted; the recording so far is in {record_dir} (memgap report {record_dir})",
              file=sys.stderr)
        raise
    _write_and_show(record_dir, json_path)
    return code


def _replace_earlier(record_dir: str) -> None:
    """FILE.d of an earlier run with the same --json goes, as FILE does: the recorder appends, and
    the two runs' samples and processes were read back as one run. A folder that is not a
    recording is left alone and refused."""
    if not os.path.isdir(record_dir) or not os.listdir(record_dir):
        return
    if not os.path.exists(os.path.join(record_dir, SAMPLES_FILE)):
        raise UsageError(f"{record_dir} exists and is not a memgap recording: choose another --json")
    shutil.rmtree(record_dir)


def _write_and_show(record_dir: str, json_path: str | None) -> None:
    run = load_run(record_dir)
    if json_path:
        write_json(run, json_path)
    if json_path != "-":
        render_run(run, sys.stdout)
        if not json_path:
            print(f"recording kept in {record_dir}")


def main(args: argparse.Namespace) -> int:
    return run_and_report(list(args.cmd), args.interval, args.json, walk=args.walk, phase_regex=args.phase_regex,
                          agent=not args.no_agent, load=args.load, rest=args.rest)

