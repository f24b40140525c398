"""One trim record for every route a trim takes (issue 26): ``memgap.trim()`` in the process, the idle
and periodic trimmers, the native agent (``memgap run``'s trim at idle, ``inspect --trim`` where the
process carries it) and gdb (``inspect --trim``: glibc's malloc_trim, jemalloc's purge, tcmalloc's and
mimalloc's release calls). Each route returns a ``TrimRecord``; a snapshot taken right after a trim
holds it (``Snapshot.trim``), a run's process its trimmer's (``ProcessRecord.trims``). Below the
snapshot (memgap.documents.snapshot) and the records (memgap.documents.records), which import it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from memgap.documents.fields import dataclass_fields, of_type, signed_keys, typed_value
from memgap.documents.json_value import JsonObject, shaped_object


class Word(str, enum.Enum):
    """A str-valued enum: in JSON, in ``str()`` and in f-strings it is its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class TrimRoute(Word):
    """How a trim reached the process."""

    IN_PROCESS = "in-process"  # memgap.trim() in the process itself (the bootstrap's trim at idle among them)
    AGENT = "agent"            # memgap's native agent, asked over its socket
    GDB = "gdb"                # inspect --trim through gdb
    TRIMMER = "trimmer"        # the idle or periodic trimmer, on its own


class _Part(TypedDict):
    call: str
    returned: int | None
    released: int
    estimate: int | None
    estimate_route: str


class TrimPart(_Part, total=False):
    """One allocator's part of a trim that called two (glibc's malloc_trim, then a prefixed jemalloc's
    purge: memgap.allocators.jemalloc_beside)."""

    dirty: int | None  # jemalloc's part only
    muzzy: int | None


class TrimDetails(TypedDict, total=False):
    """What a route adds to a trim record, in its JSON after the record's own fields (in the order the
    route writes them): the call and what it returned, memgap's estimate made beforehand and how,
    gdb's timings, notes; in-process, the pages of pymalloc's empty pools given back first."""

    pymalloc_released: int
    call: str
    returned: int | None
    estimate: int | None
    estimate_complete: bool | None
    estimate_route: str
    estimate_rss: int
    estimate_parts: dict[str, int]
    own_before: JsonObject          # tcmalloc's or mimalloc's own figures (TcmallocDeep/MimallocDeep.to_dict())
    own_after: JsonObject | None
    parts: dict[str, TrimPart]
    gdb_seconds: dict[str, float]       # attach, held
    notes: list[str]


# The keys of a trim record that are its typed fields; any other key is the route's detail.
_TRIM_CORE = ("performed", "route", "by", "rss_before", "rss_after", "released", "seconds", "reason", "time",
              "started", "cpu")


@dataclass
class TrimRecord:
    """What one trim did: VmRSS before and after, and how it reached the process. Every
    place that trims records it through this class: ``memgap.trim()`` (in-process), the
    idle and periodic trimmers, ``inspect --trim`` (gdb or the agent), ``memgap run``'s
    trim at idle through the agent, and the lab, which reads them back."""

    SIGNED = frozenset({"released"})  # given by the agent: VmRSS may have grown meanwhile

    rss_before: int
    rss_after: int
    route: TrimRoute = TrimRoute.IN_PROCESS
    performed: bool = True
    released: int | None = None   # None: VmRSS before less after (never below 0)
    seconds: float | None = None  # what the trim call took; the trimmer's records have none
    reason: str = ""              # why it was not performed
    time: float | None = None     # the trimmer's records: when it returned (time.time())
    started: float | None = None  # the trimmers' records since their spans: when it began (time.time())
    cpu: float | None = None      # ... and its thread's CPU seconds from then to ``time``
    # what the route adds, in its order: the call and what it returned, the estimate beside the
    # release (estimate, estimate_complete, estimate_route, estimate_rss, ...), gdb's timings, notes
    details: TrimDetails = field(default_factory=lambda: TrimDetails(), metadata={"flat": True})

    def __post_init__(self) -> None:
        if self.released is None:
            self.released = max(0, self.rss_before - self.rss_after)

    def to_dict(self) -> JsonObject:
        """The record as JSON: the trimmer's is ``time``, ``rss_before``, ``rss_after`` (and its
        ``started`` and ``cpu`` where timed: recordings before them hold neither); any
        other carries ``performed``, its ``route`` (none in-process), the figures and ``reason``."""
        if self.route is TrimRoute.TRIMMER:
            out: JsonObject = {"time": self.time, "rss_before": self.rss_before, "rss_after": self.rss_after}
            out.update({k: v for k, v in (("started", self.started), ("cpu", self.cpu)) if v is not None})
        else:
            out = {"performed": self.performed}
            if self.route is not TrimRoute.IN_PROCESS:
                out["route"] = self.route.value
            out.update(rss_before=self.rss_before, rss_after=self.rss_after, released=self.released,
                       seconds=self.seconds, reason=self.reason)
            if self.time is not None:
                out["time"] = self.time
        out.update(shaped_object(self.details))
        return out

    @classmethod
    def from_dict(cls, data: Any, what: str = "trim record") -> TrimRecord:
        """A trim record again. Its route: ``route``, or ``by`` (what ``memgap run`` wrote for the
        agent's trims before 0.x: read as ``route``); without either, in-process where it says
        ``performed``, else the trimmer's."""
        data = of_type(data, dict, what)
        route = data.get("route", data.get("by"))
        if route is None:
            route = TrimRoute.IN_PROCESS if "performed" in data else TrimRoute.TRIMMER
        core = {k: v for k, v in data.items() if k in _TRIM_CORE}
        kwargs = dataclass_fields(cls, core, what, skip=("route", "details"))
        return cls(**kwargs, route=typed_value(route, TrimRoute, f"{what}, field 'route'"),
                   details=cast(TrimDetails, {k: v for k, v in data.items() if k not in _TRIM_CORE}))


signed_keys(_Part, "released")  # each call's release, by VmRSS: it may have grown meanwhile
signed_keys(TrimDetails, "pymalloc_released")
