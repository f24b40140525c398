"""Run a workload under allocator variants and recommend the cheapest fix that works.

Each variant runs, interleaved (A B C A B C), each run recorded like `memgap
run` (the tree over time; phase snapshots of Python processes). Without --reps
the lab is adaptive: after one round, variants that cannot win are dropped and
the rest run on (up to 3 times) until two rounds agree; --reps N runs the full
grid. The figure that decides is --objective's: for a driven service (--load,
or a workload whose baseline rested between bursts during its work) the mean
RSS over the work, time-weighted; where a variant sets PyTorch's CUDA cache, the
tree's GPU memory at idle (NVML, beside RSS); else the idle. Idle is the program's phase
named idle (memgap.phase("idle") or a --phase-regex line), else found: its last quiet spell (under 10% of a CPU, RSS
steady, 1 s), else the moment before it exits; the output says which. The
figures are those of the tree: where several of its processes live at idle, idle
is their sum by PSS (shared pages split among their sharers, not counted once per
process), else its largest process's; --process REGEX ranks one process. Each run
trims once at idle to measure what malloc_trim(0) releases. Variants are ranked by
idle RSS within a slowdown budget; one is called better only when its whole
range clears the baseline's and its median is at least 5% and 2 MiB lower
(where none is: keep the defaults); too slow means beyond the budget plus the
baseline's own spread between its runs (at most the budget again: a wider
spread is said). The recommendation is the cheapest
remedy that no other one clearly undercuts (its whole idle range below, and by
more than 5%). --memory-limit SIZE runs each run in a memory cgroup of its own
capped at SIZE: a variant the kernel OOM-kills there is never recommended.
Without --variant the default set runs, and the baseline's first run picks more
from its findings (gc=freeze-at-fork where forked workers copied their master's
pages, read from outside at rest; arena caps and a lower mmap threshold where
glibc keeps free memory; the allocator's own settings where it is jemalloc or
tcmalloc; a runtime's own settings where its heap was read: Go, the JVM, Node);
the output says why each variant ran.

  memgap lab --reps 3 -- python -m memgap.scenarios.threadpool
  memgap lab --variant glibc --variant glibc:arena_max=2,trim=idle \\
             --variant jemalloc:background_thread=true,dirty_decay_ms=1000 -- CMD ...
  memgap lab --variant glibc --variant go:gogc=50 --variant go:memlimit=256MiB -- ./server

Variant specs: glibc[:arena_max=N,mmap_threshold=B,trim_threshold=B,top_pad=B,
mmap_max=N, or any tunable in full: glibc.malloc.tcache_count=0 (GLIBC_TUNABLES)],
jemalloc[:MALLOC_CONF options], tcmalloc[:opt=v], mimalloc[:opt=v]; any glibc
variant takes trim=idle, trim=quiet or trim=every:SECONDS, and with a trim
pymalloc=release; any takes pymalloc=off, and gc=freeze-at-fork for a Python
program that forks workers. A runtime's own settings, through the variables it
reads at start (added to the user's): go:gogc=N|off,memlimit=SIZE (GOGC,
GOMEMLIMIT: 256MiB),madvdontneed=0|1 (GODEBUG); jvm:maxheapfreeratio=N,
minheapfreeratio=N,periodic_gc_ms=N (G1PeriodicGCInterval),gc=serial|parallel|g1,
xms=SIZE,xmx=SIZE (JAVA_TOOL_OPTIONS); node:max_old_space_size=MiB,semi_space=MiB
(NODE_OPTIONS). Parts join with +: jvm:gc=serial+glibc:arena_max=2.
"""
from __future__ import annotations

import argparse
import re
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from memgap.allocators.variants import DEFAULT_SPECS, Variant, parse_variant, resolve
from memgap.cli import _common
from memgap.cli._common import write_lab
from memgap.errors import UsageError
from memgap.lab.journal import take_folder
from memgap.lab.objective import OBJECTIVES
from memgap.lab.runner import LabInterrupted, run_lab
from memgap.lab.state import LabOptions

if TYPE_CHECKING:  # rich is imported only where a terminal shows the bar
    from rich.progress import Progress, TaskID


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", action="append", metavar="SPEC",
                   help="a variant to run (repeatable); default: a set covering glibc tunables, trims, "
                        "jemalloc, tcmalloc, mimalloc and pymalloc off, and what the baseline's findings point "
                        "to (the collector frozen at fork where forked workers copied their master's pages, "
                        "arena caps and mmap thresholds where glibc retains, the allocator's own settings, "
                        "the runtime's own settings where a Go, JVM or Node heap was read)")
    p.add_argument("--reps", type=_common.count, default=None,
                   help="run every variant exactly this many times (the full grid); default: adaptive, up to 3 "
                        "each: after a first round, variants that cannot win (no usable run, idle not below the "
                        "baseline's in any run, far too slow) are dropped, and the contenders run on until two "
                        "rounds in a row give the same verdict")
    p.add_argument("--timeout", type=_common.seconds, default=600.0, metavar="S",
                   help="seconds per run before it is stopped")
    p.add_argument("--max-slowdown", type=_common.share, default=0.05, metavar="F",
                   help="the throughput budget: a variant may be at most this much slower (0.05 = 5%%)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="sweep an environment variable of the workload (repeatable: the grid of all values)")
    p.add_argument("--phase-regex", metavar="REGEX", default="",
                   help="lines of the workload's stdout that mark a phase (group 1 names it, e.g. "
                        "'phase: (\\S+)'); memgap reads the process from outside at each")
    p.add_argument("--idle-after", type=_common.seconds_or_zero, default=0.0, metavar="S",
                   help="a workload quiet for S seconds (no new phase, and under 10%% of a CPU) is idle: "
                        "measured from outside, then stopped (for servers and programs that mark no idle phase)")
    p.add_argument("--load", type=_common.command, default=[], metavar="CMD",
                   help="for a service that does not exit by itself: once it is up (quiet 0.5 s), run this load "
                        "command (one string) against it, then wait --rest seconds of quiet, measure, and stop "
                        "it; --metric-regex then reads the load's output")
    p.add_argument("--rest", type=_common.seconds, default=3.0, metavar="S",
                   help="with --load: seconds the service must rest after the load before it is measured and "
                        "stopped (3: time for the idle trimmer of trim=quiet variants to act)")
    p.add_argument("--objective", choices=OBJECTIVES, default="",
                   help="the figure that decides: mean (the time-weighted mean RSS of the tree over the work: "
                        "from the start, or the load's, to the final rest), idle (at the end, after the final "
                        "rest), peak, or gpu (the tree's GPU memory at idle, NVML); default: gpu where a "
                        "variant sets PyTorch's CUDA cache and the baseline recorded device memory, mean for a "
                        "driven service (--load, or a workload whose baseline rested between bursts during its "
                        "work), else idle")
    p.add_argument("--process", metavar="REGEX", default="",
                   help="rank on one process of the workload's tree, by its command line (default: the tree's "
                        "PSS total at idle where several processes live then, and the largest process's figures)")
    p.add_argument("--no-agent", action="store_true",
                   help="do not preload memgap's native agent (without it, trims and trimmer variants do "
                        "not reach programs that are not Python)")
    p.add_argument("--metric", metavar="NAME", default="",
                   help="throughput: a figure the workload reports with memgap.metric(NAME, value), higher "
                        "is better (default: the workload's wall time)")
    p.add_argument("--metric-regex", metavar="REGEX", default="",
                   help="read --metric from the workload's stdout instead: group 1 of the last matching line")
    p.add_argument("--memory-limit", type=_common.size, default=None, metavar="SIZE",
                   help="run each run in a memory cgroup of its own capped at SIZE (512M, 1G, 1.5GiB: powers of "
                        "1024; swap capped too), to see which variants that limit OOM-kills; needs root and a "
                        "writable memory cgroup (v1, or v2 with the controller delegated). Without it, runs "
                        "still get an uncapped cgroup each where one can be made, for their peak")
    p.add_argument("--json", metavar="FILE", help="write the lab's results as JSON")
    p.add_argument("--markdown", metavar="FILE", help="also write the variants table as Markdown")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with charts")
    p.add_argument("--dir", metavar="DIR", help="keep the recordings here (default: a new temporary folder)")
    p.add_argument("--show-output", action="store_true", help="let the workload print to the terminal")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the workload to run")


class _Progress:
    """A progress bar on a terminal, one line per finished run elsewhere (logs, CI)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress("lab", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(file=sys.stderr))
            self.bar.start()
            self.task = self.bar.add_task("runs", total=self.total)
        return self

    def __call__(self, line: str) -> None:
        if self.bar is None:
            print(line, file=sys.stderr, flush=True)
        else:
            self.bar.console.print(line, markup=False, highlight=False)
            if self.task is not None:
                self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


@dataclass(frozen=True)
class LabRequest:
    """``memgap lab``'s options, checked where they are read: a workload given, the patterns
    compile, --metric-regex has its --metric, the variant specs and the --param sweeps parse.
    The lab's LabOptions (memgap.lab.state) is built from it by ``lab_options``, once the variants
    are looked for on this machine and the recordings' folder is made."""

    cmd: tuple[str, ...]
    variants: tuple[Variant, ...]  # parsed, the glibc baseline first where none was asked for
    reps: int | None = None        # None: adaptive, up to 3 each
    timeout: float = 600.0
    max_slowdown: float = 0.05
    params: tuple[tuple[str, tuple[str, ...]], ...] = ()  # swept variables and their values, in order
    phase_regex: str = ""
    idle_after: float = 0.0
    load: tuple[str, ...] = ()
    rest: float = 3.0
    objective: str = ""            # "": by the workload (memgap.lab.objective)
    process: str = ""
    agent: bool = True
    metric: str = ""
    metric_regex: str = ""
    memory_limit: int | None = None
    json: str | None = None
    markdown: str | None = None
    html: str | None = None
    lab_dir: str | None = None     # --dir
    show_output: bool = False

    @property
    def default_set(self) -> bool:
        """Whether the variants are the default set (no --variant): the baseline's findings add to it."""
        return tuple(v.spec for v in self.variants) == DEFAULT_SPECS

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LabRequest:
        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise UsageError("no workload given: memgap lab [options] -- CMD ...")
        for flag, pattern in (("--phase-regex", args.phase_regex), ("--metric-regex", args.metric_regex),
                              ("--process", args.process)):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise UsageError(f"{flag}: {exc}") from None
        if args.metric_regex and not args.metric:
            raise UsageError("--metric-regex needs --metric NAME (what the number is)")
        return cls(cmd=tuple(cmd), variants=_variants(args.variant or DEFAULT_SPECS), reps=args.reps,
                   timeout=args.timeout, max_slowdown=args.max_slowdown,
                   params=tuple(_parse_param(p) for p in args.param), phase_regex=args.phase_regex,
                   idle_after=args.idle_after, load=tuple(args.load), rest=args.rest, objective=args.objective,
                   process=args.process,
                   agent=not args.no_agent, metric=args.metric, metric_regex=args.metric_regex,
                   memory_limit=args.memory_limit, json=args.json, markdown=args.markdown, html=args.html,
                   lab_dir=args.dir, show_output=args.show_output)

    def lab_options(self, variants: list[Variant], skipped: list[str], lab_dir: str) -> LabOptions:
        """The lab's options: ``variants`` those of the request that can run here, ``skipped`` why the others cannot."""
        return LabOptions(self.cmd, tuple(variants), self.reps or 3, self.timeout, self.max_slowdown,
                          adaptive=self.reps is None, lab_dir=lab_dir, quiet_workload=not self.show_output,
                          skipped=tuple(skipped), metric=self.metric, params=self.params,
                          phase_regex=self.phase_regex, idle_after=self.idle_after,
                          metric_regex=self.metric_regex, agent=self.agent, process=self.process,
                          load=self.load, rest=self.rest, memory_limit=self.memory_limit,
                          choose=self.default_set, objective=self.objective)


def _variants(specs: Sequence[str]) -> tuple[Variant, ...]:
    variants = [parse_variant(s) for s in specs]
    if not any(v.is_baseline for v in variants):
        variants.insert(0, parse_variant("glibc"))  # every comparison needs the baseline
    return tuple(variants)


def _parse_param(text: str) -> tuple[str, tuple[str, ...]]:
    name, eq, values = text.partition("=")
    items = tuple(v.strip() for v in values.split(",") if v.strip())
    if not eq or not name.strip() or not items:
        raise UsageError(f"--param {text!r}: expected NAME=V1,V2,...")
    return name.strip(), items


def _lab_dir(path: str | None) -> str:
    """The folder for the recordings: --dir, checked before the first run so that a bad one is a usage
    error (memgap.lab.journal.take_folder), else a new temporary folder."""
    if not path:
        return tempfile.mkdtemp(prefix="memgap-lab-")
    if take_folder(path):
        print(f"memgap lab: replacing the earlier lab's recordings in {path}", file=sys.stderr)
    return path


def main(args: argparse.Namespace) -> int:
    return execute(LabRequest.from_args(args))


def execute(request: LabRequest) -> int:
    # resolve fills in each variant's library: copies, so that the request's stay as parsed
    variants, skipped = resolve([replace(v) for v in request.variants])
    for line in skipped:
        print(f"memgap lab: skipping {line}", file=sys.stderr)
    options = request.lab_options(variants, skipped, _lab_dir(request.lab_dir))
    total = len(options.variants) * options.reps * len(options.cells())
    for stop in (signal.SIGTERM, signal.SIGHUP):  # like Ctrl-C: the run's tree ended, its cgroup removed, the rest kept
        if signal.getsignal(stop) is not signal.SIG_IGN:
            signal.signal(stop, _interrupt)
    try:
        with _Progress(total) as progress:
            lab = run_lab(options, progress=progress)
    except LabInterrupted as stop:
        write_lab(stop.document, request.json, request.html, request.markdown)
        raise KeyboardInterrupt from None
    write_lab(lab, request.json, request.html, request.markdown)
    if lab.stopped:
        print(f"memgap lab: {lab.stopped}", file=sys.stderr)
        return 1
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
