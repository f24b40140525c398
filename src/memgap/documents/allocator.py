"""The allocators a snapshot found, typed: ``Snapshot.allocator``.

What memgap.sources.allocator detects (which allocator serves malloc, where, how it is known, and
every other one found) with the figures the snapshot read beside it (glibc's mallinfo2, jemalloc's
stats, the native agent's summary, the allocator's own figures read through gdb by ``--deep``).
Its JSON is the dict snapshots always wrote: the same keys in the same order, an optional one
left out where it was not read, so a document read back and written again is the same bytes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from memgap.documents.fields import dataclass_fields, of_type, typed_value
from memgap.documents.json_value import JsonObject
from memgap.documents.recorded import AgentExit

GDB_SUFFIX = "_gdb"  # "jemalloc_gdb": an allocator's own figures read through gdb, keyed by its name


@dataclass(frozen=True)
class FoundAllocator:
    """One allocator in a process: which, in which object, under which prefix, and how we know."""

    name: str                    # jemalloc, tcmalloc, mimalloc, glibc, musl, unknown
    library: str                 # the object it lives in (the program's path for a static one)
    prefix: str = ""             # its API's symbol prefix ("je_", "_rjem_"); "?" when its symbols are stripped
    how: str = ""
    serves_malloc: bool = False  # the one ``malloc`` (and free, realloc...) resolves to
    exported: bool = False       # its API is in .dynsym: dlsym, and so memgap's agent, can find it

    def to_dict(self) -> JsonObject:
        return asdict(self)


# the optional keys, in the order a snapshot writes them: left out of the JSON where None
_OPTIONAL = ("mallinfo2", "arenas", "mmap_count", "mmap_bytes", "jemalloc", "agent", "agent_problem")


@dataclass
class AllocatorInfo:
    """The allocator serving malloc, the others found, and the figures read of them."""

    name: str = "unknown"       # the allocator serving malloc: glibc, jemalloc, tcmalloc, mimalloc, musl, unknown
    library: str = ""           # path of the object that provides malloc
    how: str = ""               # how we know
    others: list[str] = field(default_factory=list)  # further allocators found (names), beside the one above
    # every allocator found, the serving one first (None: a document from before memgap listed them)
    found: list[FoundAllocator] | None = None
    mallinfo2: dict[str, int] | None = None   # glibc's, read in the process (or by the agent)
    arenas: int | None = None                 # glibc's arenas in malloc_info
    mmap_count: int | None = None
    mmap_bytes: int | None = None
    jemalloc: dict[str, Any] | None = None    # jemalloc's stats (memgap.sources.jemalloc.JemallocStats)
    agent: AgentExit | None = None            # the native agent's summary, where it answered
    agent_problem: str | None = None          # why the agent was not asked or not taken
    # allocator -> its own figures read by --deep, written as "<allocator>_gdb"
    gdb: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"json_keys": GDB_SUFFIX + "$"})
    # keys this memgap does not know, kept as read and written back
    extra: dict[str, Any] = field(default_factory=dict, metadata={"json_keys": ""})

    @property
    def serving(self) -> FoundAllocator | None:
        """The found allocator ``malloc`` resolves to, where detection listed one."""
        return next((f for f in self.found or [] if f.serves_malloc), None)

    @property
    def beside(self) -> list[FoundAllocator]:
        """The allocators found that do not serve malloc (prefixed, bundled, or loaded but not bound)."""
        return [f for f in self.found or [] if not f.serves_malloc]

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"name": self.name, "library": self.library, "how": self.how,
                               "others": list(self.others)}
        if self.found is not None:
            out["found"] = [f.to_dict() for f in self.found]
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        for name, figures in self.gdb.items():
            out[name + GDB_SUFFIX] = figures
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Any, what: str = "allocator") -> AllocatorInfo:
        """The typed form of a snapshot's ``allocator``: every known key checked against its type."""
        data = of_type(data, dict, what)
        known = dataclass_fields(cls, data, what, skip=("gdb", "extra"))
        gdb = {k[:-len(GDB_SUFFIX)]: typed_value(v, dict[str, Any], f"{what}, field {k!r}")
               for k, v in data.items() if k.endswith(GDB_SUFFIX)}
        names = {*known, "found", *_OPTIONAL, "name", "library", "how", "others"}
        extra = {k: v for k, v in data.items() if k not in names and not k.endswith(GDB_SUFFIX)}
        return cls(**known, gdb=gdb, extra=extra)
