"""Talk to the native agent in another process: find its socket, ask, parse the reply.

The reply is text: ``key value`` lines, ``mallinfo2 k=v ...`` and the like,
then glibc's malloc_info XML after a ``malloc_info`` line, then ``end``. A
reply without ``end`` was cut short and is reported as such.
"""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import MalformedInput, MemgapError
from ..sources.glibc import Mallinfo2, MallocInfo, parse_malloc_info
from ..sources.jemalloc import JemallocStats
from ..sources.procfs import ProcReader

T = TypeVar("T")
PROTOCOL = 1
TIMEOUT = 2.0
SUN_PATH_MAX = 108  # sizeof(sockaddr_un.sun_path) on Linux, the terminating zero included


@dataclass
class AgentReport:
    """What the agent in ``pid`` said about its allocator."""

    pid: int
    allocator: str
    malloc_from: str
    rss: int
    trimmer: dict[str, Any] = field(default_factory=dict)
    mallinfo: Mallinfo2 | None = None
    malloc_info: MallocInfo | None = None
    jemalloc: JemallocStats | None = None
    tcmalloc: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0  # how long the question took
    # in the exit record (agent-PID.txt): its hold for the recorder (time, held, answered, tried)
    # and the process's command line
    exit: dict[str, float] = field(default_factory=dict)
    cmdline: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest (the XML itself is not kept)."""
        out: dict[str, Any] = {"allocator": self.allocator, "malloc_from": self.malloc_from, "rss": self.rss,
                               "trimmer": self.trimmer, "seconds": round(self.seconds, 6)}
        if self.mallinfo is not None:
            out["mallinfo2"] = self.mallinfo.__dict__.copy()
        if self.malloc_info is not None:
            out["arenas"] = len(self.malloc_info.arenas)
            out["mmap_count"], out["mmap_bytes"] = self.malloc_info.mmap_count, self.malloc_info.mmap_bytes
        if self.jemalloc is not None:
            out["jemalloc"] = self.jemalloc.__dict__.copy()
        if self.tcmalloc:
            out["tcmalloc"] = dict(self.tcmalloc)
        if self.exit:
            out["exit"] = dict(self.exit)
        if self.cmdline:
            out["cmdline"] = list(self.cmdline)
        return out


@dataclass
class AgentTrim:
    """A trim the agent ran inside its process, measured there from VmRSS."""

    pid: int
    released: int
    seconds: float
    rss_before: int
    rss_after: int


def _pairs(words: list[str], source: str) -> dict[str, str]:
    out = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            raise MalformedInput(source, f"expected key=value, got {word!r}")
        out[key] = value
    return out


def _header(text: str, source: str) -> tuple[dict[str, str], list[str], str]:
    """Split a reply into its ``key value`` lines, the ``name k=v`` lines and the XML."""
    head, marker, rest = text.partition("\nmalloc_info\n")
    xml = ""
    if marker:
        xml, _, tail = rest.rpartition("</malloc>")
        xml += "</malloc>"
        head += tail
    lines = head.splitlines()
    if not lines or not lines[0].startswith("memgap-agent "):
        raise MalformedInput(source, "not a memgap agent reply")
    if "end" not in lines:
        raise MalformedInput(source, "the reply was cut short (no 'end' line)")
    simple, records = {}, []
    for line in lines:
        key, _, value = line.partition(" ")
        if "=" in value:
            records.append(line)
        else:
            simple[key] = value
    return simple, records, xml


def _int(value: str, source: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise MalformedInput(source, f"{value!r} is not a number") from None


def _parsed(parse: Callable[[str, str], T], text: str, source: str) -> T:
    """``parse(text, source)``, with any slip on unexpected text reported as MalformedInput."""
    try:
        return parse(text, source)
    except (ValueError, TypeError, KeyError) as exc:
        raise MalformedInput(source, str(exc)) from None


def _cmdline(hexed: str, source: str) -> list[str]:
    """The exit record's command line: /proc/self/cmdline in hex (its arguments NUL-separated)."""
    try:
        raw = bytes.fromhex(hexed)
    except ValueError:
        raise MalformedInput(source, "its cmdline is not hex") from None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def parse_report(text: str, source: str = "agent reply") -> AgentReport:
    """Parse a ``stats`` reply (raises MalformedInput on anything else)."""
    return _parsed(_parse_report, text, source)


def _parse_report(text: str, source: str) -> AgentReport:
    simple, records, xml = _header(text, source)
    report = AgentReport(pid=_int(simple.get("pid", ""), source), allocator=simple.get("allocator", "unknown"),
                         malloc_from=simple.get("malloc_from", ""), rss=_int(simple.get("rss", "-1"), source),
                         cmdline=_cmdline(simple.get("cmdline", ""), source))
    for line in records:
        name, *words = line.split()
        if name == "trimmer":
            report.trimmer = {"mode": (words and words[0]) or "off",
                              **{k: float(v) for k, v in _pairs(words[1:], source).items()}}
            continue
        values = _pairs(words, source)
        if name == "mallinfo2":
            report.mallinfo = Mallinfo2(**{k: _int(v, source) for k, v in values.items()})
        elif name == "jemalloc":
            v = {k: _int(x, source) for k, x in values.items()}
            report.jemalloc = JemallocStats(v.get("allocated", 0), v.get("active", 0), v.get("resident", 0),
                                            v.get("retained", 0), v.get("mapped", 0), v.get("metadata", 0),
                                            v.get("narenas", 0), muzzy=v.get("muzzy", 0))
        elif name == "tcmalloc":
            report.tcmalloc = {k: _int(x, source) for k, x in values.items()}
        elif name == "exit":
            report.exit = {k: float(x) for k, x in values.items()}
    if xml:
        report.malloc_info = parse_malloc_info(xml, bins=False)
    return report


def parse_trim(text: str, source: str = "agent reply") -> AgentTrim:
    """Parse a ``trim`` reply (raises MalformedInput on anything else)."""
    return _parsed(_parse_trim, text, source)


def _parse_trim(text: str, source: str) -> AgentTrim:
    simple, records, _ = _header(text, source)
    for line in records:
        name, *words = line.split()
        if name == "trim":
            v = {k: float(x) for k, x in _pairs(words, source).items()}
            return AgentTrim(_int(simple.get("pid", ""), source), int(v["released"]), v["seconds"],
                             int(v["rss_before"]), int(v["rss_after"]))
    raise MalformedInput(source, "no trim line")


def socket_path(pid: int, environ: dict[str, str], uid: int) -> str:
    """Where the agent in ``pid`` listens, given its environment and owner (as agent.c decides)."""
    name = f"agent-{pid}.sock"
    folder = environ.get("MEMGAP_AGENT_DIR") or environ.get("MEMGAP_RECORD_DIR")
    if folder and len(f"{folder}/{name}".encode()) < SUN_PATH_MAX:
        return f"{folder}/{name}"
    return f"/tmp/memgap-agent-{uid}/{name}"  # none given, or too long for a socket address


def find_socket(pid: int, proc_root: str = "/proc", reader: ProcReader | None = None) -> str | None:
    """The socket of memgap's agent in ``pid``, found and checked: None where the process does
    not preload the agent (or cannot be read: its environment and owner say where the socket is).

    Raises MemgapError where it preloads the agent but there is no socket at its place, or one
    the process's owner did not make (that one is not its agent).
    """
    try:
        environ = (reader or ProcReader(pid, proc_root)).environ()
        uid = os.stat(f"{proc_root}/{pid}").st_uid
    except (OSError, MemgapError):
        return None
    if "memgap" not in environ.get("LD_PRELOAD", ""):
        return None
    path = socket_path(pid, environ, uid)
    try:
        owner = os.stat(path).st_uid
    except OSError:
        raise MemgapError(f"the agent is preloaded but has no socket at {path}") from None
    if owner != uid:
        raise MemgapError(f"agent socket {path} is not owned by the process's user")
    return path


def trim_pid(pid: int, proc_root: str = "/proc", timeout: float = 30.0) -> AgentTrim:
    """Ask the agent in ``pid`` to trim its allocator now (MemgapError where it has none)."""
    path = find_socket(pid, proc_root)
    if path is None:
        raise MemgapError(f"PID {pid} has no memgap agent preloaded")
    return trim(path, timeout)


def _ask(path: str, command: str, timeout: float) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        conn.sendall(command.encode() + b"\n")
        chunks: list[bytes] = []
        while True:
            chunk = conn.recv(1 << 16)
            if not chunk:
                return b"".join(chunks).decode("utf-8", "replace")
            chunks.append(chunk)


def query(path: str, timeout: float = TIMEOUT) -> AgentReport:
    """Ask the agent listening at ``path`` for its statistics."""
    started = time.perf_counter()
    try:
        text = _ask(path, "stats", timeout)
    except OSError as exc:
        raise MemgapError(f"the agent at {path} did not answer: {exc.strerror or exc}") from None
    report = parse_report(text, f"agent reply from {path}")
    report.seconds = time.perf_counter() - started
    return report


def trim(path: str, timeout: float = 30.0) -> AgentTrim:
    """Ask the agent listening at ``path`` to trim its allocator now."""
    try:
        text = _ask(path, "trim", timeout)
    except OSError as exc:
        raise MemgapError(f"the agent at {path} did not answer: {exc.strerror or exc}") from None
    return parse_trim(text, f"agent reply from {path}")
