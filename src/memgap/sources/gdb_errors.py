"""What a gdb session raises, and Ctrl-C held off while it lets go (``gdb_attach``'s session)."""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from memgap.errors import MemgapError


class GdbTimeout(MemgapError):
    """A gdb step did not finish in time; it was interrupted and gdb detached."""

    def __init__(self, pid: int, what: str, seconds: float) -> None:
        self.pid = pid
        super().__init__(f"gdb did not finish {what} in PID {pid} within {seconds:g} s: "
                         "interrupted and detached, the process runs on")


class CallFailed(MemgapError):
    """gdb reported an error for a call (a call stopped by a signal was unwound first)."""

    def __init__(self, expr: str, message: str) -> None:
        self.expr = expr
        self.gdb_message = message
        first = message.strip().splitlines()[0] if message.strip() else "no message"
        super().__init__(f"gdb: {expr}: {first}")


class GdbFailed(MemgapError):
    """gdb itself failed: it exited, or answered what memgap cannot use."""


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold off a second Ctrl-C while memgap lets go of the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
