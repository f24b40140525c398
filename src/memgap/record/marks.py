"""Phases of a program memgap cannot change: lines it prints, or a quiet spell.

``StdoutMarks`` reads the program's stdout in a thread, passes every line on
(to memgap's stdout or nowhere) and turns each line the user's regular
expression matches into a phase mark (the first group names it, else the
whole match). ``PhaseClock`` says when the program last marked a phase, its
own (phase snapshots in the recording) or from its output.
"""
from __future__ import annotations

import os
import queue
import re
import sys
import threading
import time
from typing import IO, NamedTuple, TypeVar

_T = TypeVar("_T")


class Mark(NamedTuple):
    """A phase mark, with the program's VmRSS (None: not read) and the time as its line arrived."""

    name: str
    rss: int | None
    at: float


class StdoutMarks:
    """Phase marks (``pattern``) and metric values (``metric_pattern``, group 1 a number)
    from the lines a program prints."""

    def __init__(self, stream: IO[bytes], pattern: str, echo: bool, metric_pattern: str = "",
                 pid: int | None = None) -> None:
        self.regex = re.compile(pattern) if pattern else None
        self.metric_regex = re.compile(metric_pattern) if metric_pattern else None
        # each mark with the program's VmRSS and the time as its line arrived (``pid``: whose): the recorder
        # may be in the middle of a read of the tree then, and the program runs on meanwhile
        self.marks: queue.Queue[Mark] = queue.Queue()
        self.pid = pid
        self.values: queue.Queue[float] = queue.Queue()
        self.echo = echo
        # Set when a mark arrives, and when the stream ends (the program exited, mostly):
        # the recorder's loop wakes at once instead of at its next sample.
        self.arrived = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(stream,), name="memgap-stdout", daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        out = sys.stdout.buffer if self.echo else None
        for raw in iter(stream.readline, b""):
            if out is not None:
                out.write(raw)
                out.flush()
            line = raw.decode("utf-8", "replace")
            match = self.regex.search(line) if self.regex else None
            if match:
                self.marks.put(Mark(match.group(1) if match.groups() else match.group(0), *self._rss_now()))
                self.arrived.set()
            match = self.metric_regex.search(line) if self.metric_regex else None
            if match:
                try:
                    self.values.put(float(match.group(1) if match.groups() else match.group(0)))
                except ValueError:
                    pass  # a line that matched but holds no number
        self.arrived.set()

    @staticmethod
    def _drain(q: queue.Queue[_T]) -> list[_T]:
        items: list[_T] = []
        while True:
            try:
                items.append(q.get_nowait())
            except queue.Empty:
                return items

    def _rss_now(self) -> tuple[int | None, float]:
        if self.pid is None:
            return None, time.time()
        try:
            with open(f"/proc/{self.pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmRSS:"):
                        return int(line.split()[1]) * 1024, time.time()
        except (OSError, ValueError, IndexError):
            pass
        return None, time.time()

    def pending(self) -> list[str]:
        return [m.name for m in self._drain(self.marks)]

    def pending_marks(self) -> list[Mark]:
        """The marks arrived since the last call, each with the program's VmRSS as its line arrived."""
        return self._drain(self.marks)

    def pending_values(self) -> list[float]:
        return self._drain(self.values)


class PhaseClock:
    """When the program last marked a phase (monotonic seconds)."""

    def __init__(self, record_dir: str) -> None:
        self.record_dir = record_dir
        self.last = time.monotonic()
        self._sizes: dict[str, int] = {}

    def mark(self) -> None:
        self.last = time.monotonic()

    def poll(self) -> None:
        """A phase snapshot written by a Python child since the last poll counts as a mark."""
        try:
            entries = [e for e in os.scandir(self.record_dir) if e.name.startswith("process-")]
        except OSError:
            return
        for entry in entries:
            size = entry.stat().st_size
            if size != self._sizes.get(entry.name):
                self._sizes[entry.name] = size
                self.mark()

    def quiet_for(self) -> float:
        return time.monotonic() - self.last


class CpuActivity:
    """Whether a process tree did work since the last look: a program computing for
    a long while without marking a phase is busy, not idle."""

    BUSY = 0.1  # of one CPU: more than this between two looks counts as work

    def __init__(self) -> None:
        self._ticks: dict[int, int] = {}
        self._at = time.monotonic()
        self._hz = os.sysconf("SC_CLK_TCK")

    def busy(self, pids: list[int]) -> bool:
        from memgap.sources.procfs import ProcReader

        used = 0
        for pid in pids:
            try:
                ticks = ProcReader(pid).stat().cpu_ticks
            except Exception:  # noqa: BLE001 - exited meanwhile
                continue
            used += ticks - self._ticks.get(pid, ticks)
            self._ticks[pid] = ticks
        now = time.monotonic()
        elapsed, self._at = now - self._at, now
        return elapsed > 0 and used / self._hz > self.BUSY * elapsed
