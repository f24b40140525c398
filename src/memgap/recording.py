"""An append-only recording: one JSON object per line, flushed as it is written,
so a run killed midway keeps every line written before the kill.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from .doc_fields import parse_json
from .envnames import RECORD_DIR_ENV
from .errors import MalformedInput


class RecordingWriter:
    """Appends events to a JSON-lines file (safe to share between threads)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":"), default=str)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_events(path: str) -> Iterator[dict[str, Any]]:
    """Events of a recording; a last line cut short by a kill is skipped, any other bad line is an error."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except OSError as exc:
        raise MalformedInput(path, exc.strerror or str(exc)) from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield parse_json(line, f"{path}, line {number}")
        except MalformedInput:
            if number >= len(lines) - 1:  # the final line, interrupted mid-write
                return
            raise


def child_recording_path(directory: str, pid: int | None = None) -> str:
    return os.path.join(directory, f"process-{pid or os.getpid()}.jsonl")


class ProcessFile:
    """This process's own file in the recording folder named by MEMGAP_RECORD_DIR
    (``process-PID{suffix}.jsonl``), opened on first use; a forked child opens its own."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix
        self._writer: RecordingWriter | None = None
        self._pid = 0

    def writer(self) -> RecordingWriter | None:
        """The writer, or None when no recording is under way."""
        directory = os.environ.get(RECORD_DIR_ENV)
        if not directory:
            return None
        if self._writer is None or self._pid != os.getpid():
            path = child_recording_path(directory)
            self._writer = RecordingWriter(path[:-len(".jsonl")] + self.suffix + ".jsonl")
            self._pid = os.getpid()
        return self._writer
