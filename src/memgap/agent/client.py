"""Talk to the native agent in another process: find its socket, ask, parse and check the reply.

The reply is text: ``key value`` lines, ``mallinfo2 k=v ...`` and the like,
then glibc's malloc_info XML after a ``malloc_info`` line, then ``end``. A
reply without ``end`` was cut short and is reported as such.

memgap runs as root beside other users' processes, and any of them can name memgap in its
LD_PRELOAD and listen where its agent would. So an agent is asked only where its socket
belongs to the process's own user and the listener is that process (SO_PEERCRED, checked
before a byte is sent); the whole exchange has one deadline (``TIMEOUT``) and the reply a
size cap (``REPLY_CAP``); every figure is checked (``memgap.agent.checks``) before it is used.
A refusal is an ``AgentRefused``: one line saying why, and the snapshot goes on without it.
"""
from __future__ import annotations

import os
import socket
import stat
import struct
import time
from dataclasses import dataclass

from memgap.agent.checks import AgentRefused, check_report, check_trim, limits_of
from memgap.agent.reply import AgentReport, parse_report, parse_trim
from memgap.documents.trim import TrimRecord
from memgap.errors import MalformedInput, MemgapError
from memgap.sources.procfs import ProcReader

PROTOCOL = 1
TIMEOUT = 2.0  # s, for the whole exchange: connect, ask, every read
SUN_PATH_MAX = 108  # sizeof(sockaddr_un.sun_path) on Linux, the terminating zero included
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# A glibc reply is mostly malloc_info: measured 0.85-3.2 KiB per arena (one thread; 64 threads
# fragmenting 16 arenas), at most ~8 KiB with every one of its ~137 bins listed. glibc makes up
# to 8 arenas per CPU: 64 KiB per CPU, 1 MiB at least, never over the agent's own buffer (8 MiB).
REPLY_CAP = min(8 << 20, max(1 << 20, 8 * (os.cpu_count() or 1) * (8 << 10)))


def socket_path(pid: int, environ: dict[str, str], uid: int) -> str:
    """Where the agent in ``pid`` listens, given its environment and its real uid (as agent.c decides)."""
    name = f"agent-{pid}.sock"
    folder = environ.get("MEMGAP_AGENT_DIR") or environ.get("MEMGAP_RECORD_DIR")
    if folder and len(f"{folder}/{name}".encode()) < SUN_PATH_MAX:
        return f"{folder}/{name}"
    return f"/tmp/memgap-agent-{uid}/{name}"  # none given, or too long for a socket address


@dataclass(frozen=True)
class AgentPeer:
    """The process whose agent memgap may talk to: the only peer a reply is taken from."""

    pid: int
    uid: int      # its effective uid: the owner of the socket its agent made, and the listener's
    path: str     # where its agent listens
    proc_root: str = "/proc"

    def check_socket(self) -> None:
        """Refuse a path that is not a socket its user made (lstat: a symlink is not followed)."""
        try:
            st = os.lstat(self.path)
        except OSError:
            raise AgentRefused(f"the agent is preloaded but has no socket at {self.path}") from None
        if not stat.S_ISSOCK(st.st_mode):
            raise AgentRefused(f"{self.path} is not a socket (a symlink or a file someone put there)")
        if st.st_uid != self.uid:
            raise AgentRefused(f"agent socket {self.path} belongs to uid {st.st_uid}, not to the process's "
                               f"user (uid {self.uid})")

    def check_peer(self, pid: int, uid: int) -> None:
        """Refuse a listener that is not the process (SO_PEERCRED: its PID or one of its threads)."""
        ours = pid == self.pid or (pid > 0 and os.path.exists(f"{self.proc_root}/{self.pid}/task/{pid}"))
        if uid != self.uid or not ours:
            raise AgentRefused(f"the socket {self.path} is served by PID {pid} (uid {uid}), not by PID "
                               f"{self.pid} (uid {self.uid}): not its agent")


def _ids(status: dict[str, int | str]) -> tuple[int, int]:
    """(real, effective) uid from /proc/PID/status's ``Uid:`` line."""
    words = str(status.get("Uid", "")).split()
    if len(words) < 2 or not all(w.isascii() and w.isdigit() for w in words[:2]):
        raise MalformedInput("status", f"Uid line {status.get('Uid')!r}")
    return int(words[0]), int(words[1])


def find_agent(pid: int, proc_root: str = "/proc", reader: ProcReader | None = None) -> AgentPeer | None:
    """The agent preloaded in ``pid``, its socket checked: None where the process does not preload
    memgap's agent (or cannot be read: its environment and owner say where the socket is).
    Raises AgentRefused where the socket is missing, not a socket, or not its user's."""
    reader = reader or ProcReader(pid, proc_root)
    try:
        environ = reader.environ()
        real, effective = _ids(reader.status())
    except MemgapError:
        return None
    if "memgap" not in environ.get("LD_PRELOAD", ""):
        return None
    peer = AgentPeer(pid, effective, socket_path(pid, environ, real), proc_root)
    peer.check_socket()
    return peer


def _peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process listening on the other end of a connected unix socket."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, _gid = _UCRED.unpack(raw)
    return pid, uid


def _left(deadline: float, path: str, timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise AgentRefused(f"the agent at {path} did not answer within {timeout:g} s (the whole exchange)")
    return left


def _ask(path: str, command: str, timeout: float, peer: AgentPeer | None = None, cap: int = REPLY_CAP) -> str:
    """The agent's reply to ``command``: connect, check the peer, ask, read to the end. ``timeout``
    bounds the whole exchange (not each read), ``cap`` the reply's bytes."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(_left(deadline, path, timeout))
        conn.connect(path)
        if peer is not None:  # before a byte is sent: the listener may be anything the path led to
            peer.check_peer(*_peer_credentials(conn))
        conn.sendall(command.encode() + b"\n")
        reply = bytearray()
        while True:
            conn.settimeout(_left(deadline, path, timeout))
            chunk = conn.recv(min(1 << 16, cap + 1 - len(reply)))
            if not chunk:
                return reply.decode("utf-8", "replace")
            reply += chunk
            if len(reply) > cap:
                raise AgentRefused(f"the agent at {path} sent more than {cap >> 10} KiB (a real agent's reply "
                                   f"here is under {cap >> 10} KiB): not read further")


def _exchange(path: str, command: str, timeout: float, peer: AgentPeer | None) -> str:
    try:
        return _ask(path, command, timeout, peer)
    except TimeoutError:
        raise AgentRefused(f"the agent at {path} did not answer within {timeout:g} s (the whole exchange)") from None
    except OSError as exc:
        raise MemgapError(f"the agent at {path} did not answer: {exc.strerror or exc}") from None


def query(path: str, timeout: float = TIMEOUT, peer: AgentPeer | None = None) -> AgentReport:
    """Ask the agent listening at ``path`` for its statistics (parsed, not yet checked: ``ask``)."""
    started = time.perf_counter()
    text = _exchange(path, "stats", timeout, peer)
    report = parse_report(text, f"agent reply from {path}")
    report.seconds = time.perf_counter() - started
    return report


def trim(path: str, timeout: float = 30.0, peer: AgentPeer | None = None) -> tuple[int, TrimRecord]:
    """Ask the agent listening at ``path`` to trim its allocator now: the PID its reply names, and the trim."""
    return parse_trim(_exchange(path, "trim", timeout, peer), f"agent reply from {path}")


def ask(pid: int, proc_root: str = "/proc", reader: ProcReader | None = None,
        timeout: float = TIMEOUT) -> AgentReport | None:
    """The statistics of the agent preloaded in ``pid``, from that process only and every figure
    checked (None where it has no agent). Raises MemgapError (AgentRefused) saying why not."""
    reader = reader or ProcReader(pid, proc_root)
    peer = find_agent(pid, proc_root, reader)
    if peer is None:
        return None
    before = reader.status()
    report = query(peer.path, timeout, peer)
    check_report(report, limits_of(pid, before, reader.status()))
    return report


def trim_pid(pid: int, proc_root: str = "/proc", timeout: float = 30.0) -> TrimRecord:
    """Ask the agent in ``pid`` to trim its allocator now (MemgapError where it has none, or
    one memgap will not talk to)."""
    reader = ProcReader(pid, proc_root)
    peer = find_agent(pid, proc_root, reader)
    if peer is None:
        raise MemgapError(f"PID {pid} has no memgap agent preloaded")
    before = reader.status()
    named, result = trim(peer.path, timeout, peer)
    check_trim(named, result, limits_of(pid, before, reader.status()))
    return result
