"""A service that does not exit by itself, driven by the user's own load tool.

``memgap run/lab --load CMD -- SERVICE``: the recorder starts the service and
waits until it is ready (its tree quiet for READY_QUIET seconds: started and
listening), runs the load command to its end, waits until the service has
rested ``rest`` seconds (quiet: the idle trimmer gets its turn, and memgap's
quiet-spell snapshot is taken), then the recorder stops the service. The load's
output goes to ``load-output.txt`` in the recording; with a metric regular
expression its last match is the run's throughput.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable

from memgap.documents.json_value import JsonObject
from memgap.record.recording import create_new

READY_QUIET = 0.5     # seconds of a quiet tree that mean the service is up and waiting
READY_TIMEOUT = 120.0  # seconds: a service that never goes quiet gets its load anyway
LOAD_OUTPUT = "load-output.txt"


class LoadDriver:
    """Steps through starting -> loading -> resting -> done, one look per recorder sample."""

    def __init__(self, cmd: list[str], record_dir: str, rest: float,
                 write: Callable[[JsonObject], None]) -> None:
        self.cmd, self.rest, self.write = cmd, rest, write
        self.output_path = os.path.join(record_dir, LOAD_OUTPUT)
        self.state = "starting"
        self.started = self.quiet_since = time.monotonic()
        self.proc: subprocess.Popen[bytes] | None = None
        self.load_seconds = 0.0

    def step(self, busy: bool) -> bool:
        """One look, given whether the service's tree worked since the last; True once done."""
        now = time.monotonic()
        if busy:
            self.quiet_since = now
        if self.state == "starting" and (now - self.quiet_since >= READY_QUIET or now - self.started > READY_TIMEOUT):
            self._start_load(now)
        elif self.state == "loading" and self.proc is not None and self.proc.poll() is not None:
            self.load_seconds = now - self.load_started
            self.write({"type": "load", "cmd": self.cmd, "exit_code": self.proc.returncode,
                        "seconds": round(self.load_seconds, 4), "time": time.time()})
            self.state, self.quiet_since = "resting", now
        elif self.state == "resting" and now - self.quiet_since >= self.rest:
            self.state = "done"
        return self.state == "done"

    def _start_load(self, now: float) -> None:
        self.load_started = now
        try:
            with os.fdopen(create_new(self.output_path), "wb") as out:  # a new file: no link followed
                self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        except OSError as exc:
            self.write({"type": "error", "phase": "load", "error": f"cannot run {self.cmd[0]!r}: {exc}"})
            self.state = "resting"
            return
        self.write({"type": "load-start", "time": time.time()})
        self.state = "loading"

    def stop(self) -> None:
        """The load, if it still runs (the run was cut short)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def metric(self, pattern: str) -> float | None:
        """The last number the load printed that ``pattern`` matches (group 1, else the match)."""
        try:
            with open(self.output_path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return None
        values = []
        for match in re.finditer(pattern, text):
            try:
                values.append(float(match.group(1) if match.groups() else match.group(0)))
            except ValueError:
                continue
        return values[-1] if values else None
