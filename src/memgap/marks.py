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
from typing import IO


class StdoutMarks:
    def __init__(self, stream: IO[bytes], pattern: str, echo: bool) -> None:
        self.regex = re.compile(pattern)
        self.marks: "queue.Queue[str]" = queue.Queue()
        self.echo = echo
        self.thread = threading.Thread(target=self._read, args=(stream,), name="memgap-stdout", daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        out = sys.stdout.buffer if self.echo else None
        for raw in iter(stream.readline, b""):
            if out is not None:
                out.write(raw)
                out.flush()
            match = self.regex.search(raw.decode("utf-8", "replace"))
            if match:
                self.marks.put(match.group(1) if match.groups() else match.group(0))

    def pending(self) -> list[str]:
        names = []
        while True:
            try:
                names.append(self.marks.get_nowait())
            except queue.Empty:
                return names


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
