"""The agent's replies, parsed: a ``stats`` reply into an ``AgentReport``, a ``trim`` reply into the
PID it names and a ``TrimRecord`` (memgap.documents.trim: the record every route of a trim returns)
(pure: text in, records out; ``memgap.agent.client`` does the talking and
``memgap.agent.checks`` the checking).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from memgap.documents.recorded import AgentExit, AgentJemalloc
from memgap.documents.trim import TrimRecord, TrimRoute
from memgap.errors import MalformedInput
from memgap.sources.glibc import Mallinfo2, MallocInfo, parse_malloc_info
from memgap.sources.jemalloc import JemallocStats

T = TypeVar("T")


@dataclass
class AgentReport:
    """What the agent in ``pid`` said about its allocator."""

    pid: int
    allocator: str
    malloc_from: str
    rss: int
    trimmer: dict[str, str | float] = field(default_factory=dict)  # its mode, then its figures
    mallinfo: Mallinfo2 | None = None
    malloc_info: MallocInfo | None = None
    jemalloc: JemallocStats | None = None
    tcmalloc: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0  # how long the question took
    # in the exit record (agent-PID.txt): its hold for the recorder (time, held, answered, tried)
    # and the process's command line
    exit: dict[str, float] = field(default_factory=dict)
    cmdline: list[str] = field(default_factory=list)
    trims: list[TrimRecord] = field(default_factory=list)  # its trimmers' (exit record: the last 256)

    def summary(self) -> AgentExit:
        """A JSON-ready digest (the XML itself is not kept)."""
        out: AgentExit = {"allocator": self.allocator, "malloc_from": self.malloc_from, "rss": self.rss,
                               "trimmer": self.trimmer, "seconds": round(self.seconds, 6)}
        if self.mallinfo is not None:
            out["mallinfo2"] = self.mallinfo.__dict__.copy()
        if self.malloc_info is not None:
            out["arenas"] = len(self.malloc_info.arenas)
            out["mmap_count"], out["mmap_bytes"] = self.malloc_info.mmap_count, self.malloc_info.mmap_bytes
        if self.jemalloc is not None:
            j = self.jemalloc
            out["jemalloc"] = AgentJemalloc(allocated=j.allocated, active=j.active, resident=j.resident,
                                            retained=j.retained, mapped=j.mapped, metadata=j.metadata,
                                            narenas=j.narenas, version=j.version, muzzy=j.muzzy)
        if self.tcmalloc:
            out["tcmalloc"] = dict(self.tcmalloc)
        if self.exit:
            out["exit"] = dict(self.exit)
        if self.cmdline:
            out["cmdline"] = list(self.cmdline)
        if self.trims:
            out["trims"] = [t.to_dict() for t in self.trims]
        return out


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
        elif name == "trimmed":  # one of its trimmers' trims, with its span and its thread's CPU
            report.trims.append(TrimRecord(_int(values["rss_before"], source), _int(values["rss_after"], source),
                                           TrimRoute.TRIMMER, time=float(values["time"]),
                                           started=float(values["started"]), cpu=float(values["cpu"])))
    if xml:
        report.malloc_info = parse_malloc_info(xml, bins=False)
    return report


def parse_trim(text: str, source: str = "agent reply") -> tuple[int, TrimRecord]:
    """Parse a ``trim`` reply: the PID it names and the trim the agent ran inside its process,
    measured there from VmRSS (raises MalformedInput on anything else)."""
    return _parsed(_parse_trim, text, source)


def _parse_trim(text: str, source: str) -> tuple[int, TrimRecord]:
    simple, records, _ = _header(text, source)
    for line in records:
        name, *words = line.split()
        if name == "trim":
            v = {k: float(x) for k, x in _pairs(words, source).items()}
            before, after, released = int(v["rss_before"]), int(v["rss_after"]), int(v["released"])
            if before - after != released:  # the agent writes its rss_after as rss_before less released
                raise MalformedInput(source, f"released {released} is not rss_before less rss_after")
            # released as every record has it: never below 0 (a trim that VmRSS grew across released none)
            return _int(simple.get("pid", ""), source), TrimRecord(before, after, TrimRoute.AGENT,
                                                                   seconds=v["seconds"])
    raise MalformedInput(source, "no trim line")
