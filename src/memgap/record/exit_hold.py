"""The recorder's end of the exit hold: a process of the tree says on a Unix socket that it exits, and
waits (a few seconds at most) while the recorder reads it from outside; its last snapshot is then taken
as it exits. Who calls: memgap's agent, preloaded in a process ("exit": its ``before-exit`` snapshot),
and, under ``memgap run``, Python's bootstrap ("exit before-exit", then "exit exit" after the program's
atexit handlers; "exit before-exit exit" once where nothing of the program can run between them:
memgap._hook). Light to import: it is made before the command starts, while the rest
of the recorder loads beside the command's own start."""
from __future__ import annotations

import _socket  # socket's own: socket.py builds its enums on import (4 ms before the command starts)
import os
import struct
import threading
from collections.abc import Callable

from memgap.record.envnames import BEFORE_EXIT_PHASE, EXIT_HOLD_SECONDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

SUN_PATH_MAX = 108  # sizeof(sockaddr_un.sun_path), the terminating zero included
# what a caller may name: "exit" alone (the agent's) is the first; "exit before-exit exit" (Python's, where
# nothing of its program can run between its two) asks one read for both
HELD_PHASES = (BEFORE_EXIT_PHASE, "exit")


class ExitHold:
    """The socket (mode 0600), bound and listening once made, so that the command's environment can name
    it (``path``); calls are taken from ``serve(read)`` on: each caller, known by its credentials, is read
    by ``read(pid, phases)`` while it waits (one read, the snapshot of each phase it names), then told "ok"
    and goes on to exit."""

    def __init__(self, record_dir: str) -> None:
        self._folder = ""
        path = os.path.join(record_dir, "exit.sock")
        if len(path.encode()) >= SUN_PATH_MAX:  # too long for a socket address: a short private folder
            from memgap.record.recording import new_temporary_folder

            self._folder = new_temporary_folder("memgap-exit-")
            path = os.path.join(self._folder, "exit.sock")
        self.path = path
        self._bound = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # serve() makes it a socket.socket
        self._sock: socket.socket | None = None
        try:
            if os.path.exists(path):
                os.unlink(path)
            self._bound.bind(path)
            os.chmod(path, 0o600)  # before listen(): no one else connects meanwhile
            self._bound.listen(64)  # calls before serve() wait in the backlog
        except OSError:
            self._bound.close()
            raise
        self._handlers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def serve(self, read: Callable[[int, tuple[str, ...]], None]) -> None:
        """Take calls from now on, in a thread of their own (one more for each call)."""
        import socket

        self.read = read
        self._sock = socket.socket(fileno=self._bound.detach())  # the same socket, with accept()
        self._thread = threading.Thread(target=self._serve, name="memgap-exit-hold", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()  # type: ignore[union-attr]  # made before this thread starts
            except OSError:
                return  # closed
            handler = threading.Thread(target=self._one, args=(conn,), name="memgap-exit-read", daemon=True)
            with self._lock:
                self._handlers = [h for h in self._handlers if h.is_alive()] + [handler]
            handler.start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                pid, uid, _ = struct.unpack("3i", conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
                conn.settimeout(EXIT_HOLD_SECONDS)
                said = conn.recv(32).split()
                if uid not in (0, os.getuid()) or not said or said[0] != b"exit":
                    return
                phases = tuple(p.decode("ascii", "replace") for p in said[1:]) or (BEFORE_EXIT_PHASE,)
                if not set(phases) <= set(HELD_PHASES):
                    return
                self.read(pid, phases)
                conn.sendall(b"ok\n")
            except OSError:
                return  # it gave up waiting: it has exited, or goes on to

    def close(self) -> None:
        """Stop taking calls and wait for the reads under way (they write into the recording)."""
        listening = self._sock if self._sock is not None else self._bound
        try:
            listening.shutdown(_socket.SHUT_RDWR)  # wakes the accept(); a copy of it in a fork takes none
        except OSError:
            pass
        listening.close()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            handlers = list(self._handlers)
        for handler in handlers:
            handler.join(timeout=EXIT_HOLD_SECONDS + 1)
        for path in (self.path, self._folder):
            try:
                os.rmdir(path) if path == self._folder else os.unlink(path)
            except OSError:
                pass
