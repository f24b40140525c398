"""What every allocator reader takes and gives, and what the pipeline asks of one.

One reader per allocator (``glibc.py``, ``jemalloc.py``, ``tcmalloc.py``, ``mimalloc.py``, ``pymalloc.py``),
looked up by name in the registry (memgap.allocators.registry), so that the snapshot, the
attribution, ``--deep``/``--trim`` and the findings ask the reader and never branch on a name.
As the runtimes' readers (memgap.runtimes.base) do: detect (the registry, from what
memgap.sources.allocator found), the mappings it owns, its figures from outside, in the process
and from the agent, its layers, its figures and release through gdb, its findings. Each method has
the answer of an allocator memgap cannot read (the base class): a reader overrides what it reads.
The parsing stays in memgap.sources; a reader only chooses and joins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from memgap.allocators.measured import Measurements, Owners, Sizes
from memgap.documents.json_value import JsonObject

if TYPE_CHECKING:
    from memgap.documents.allocator import FoundAllocator
    from memgap.documents.own_figures import OwnFiguresTable
    from memgap.documents.snapshot import Finding, Layer, Snapshot
    from memgap.documents.trim import TrimRecord
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.gdb_attach import GdbSession
    from memgap.sources.gdb_options import GdbOptions
    from memgap.sources.glibc import Mallinfo2, MallocInfo
    from memgap.sources.glibc_heaps import GlibcLayout
    from memgap.sources.jemalloc import JemallocStats
    from memgap.sources.memory_map import MemoryMap
    from memgap.sources.mimalloc_arenas import MemoryReader
    from memgap.sources.procfs import Mapping, ProcReader


@dataclass
class OwnFigures:
    """An allocator's own statistics, read in this process or by the native agent in another."""

    mallinfo: Mallinfo2 | None = None
    malloc_info: MallocInfo | None = None
    jemalloc: JemallocStats | None = None
    tcmalloc: dict[str, int] | None = None  # MallocExtension numeric properties (from the agent)


@dataclass
class Share:
    """What the reader of the process's C allocator says: its in-use and free resident bytes
    (None: not measured), their private and PSS parts, the anonymous pages it leaves to
    other_anon, and how it knows."""

    in_use: int | None
    free: int | None
    in_use_part: Sizes
    free_part: Sizes
    other_anon: int
    other_part: Sizes
    in_use_how: list[str] = field(default_factory=list)
    free_how: list[str] = field(default_factory=list)
    source: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def unread_share(owned: Owners) -> Share:
    """No statistics for this allocator: its memory stays under other_anon, and the two allocator
    layers say "not measured" rather than print a zero nobody measured."""
    return Share(None, None, Sizes(), Sizes(), owned("anon") + owned("glibc-heap") + owned("mmapped-chunk"),
                 owned.part("anon") + owned.part("glibc-heap", "mmapped-chunk"))


@dataclass
class Split:
    """A counting allocator's share of the anonymous pages, and how it was found."""

    owner: str             # the owner of its mappings' regions
    in_use: int
    free: int | None       # None: not measured
    unclaimed: int         # of the allocator's mappings' pages, what goes back to other_anon
    in_use_how: str
    free_how: str
    source: str
    detail: dict[str, Any]
    note: str = ""


def within_mappings(owner: str, owned: Owners, allocated: int, free_bound: int,
                    found: bool) -> tuple[int, int | None, int]:
    """(in use, free, unclaimed) from the resident pages of the allocator's own mappings.

    In use comes first (allocated bytes have been written); free takes the rest, up to
    the allocator's own count of what it holds, which only bounds it: the counters
    include pages handed out but never touched. Pages beyond the bound are someone
    else's. Without the mappings (``found`` false) free is not measured, and in use
    is the counter within every unclaimed anonymous page, as before.
    """
    resident = owned(owner)
    if not found:
        in_use = min(allocated, resident + owned("anon"))
        return in_use, None, resident - in_use
    in_use = min(allocated, resident)
    free = min(free_bound, resident - in_use)
    return in_use, free, resident - in_use - free


def counted_share(split: Split, owned: Owners) -> Share:
    """An allocator's own counters placed in the mappings found (jemalloc's, tcmalloc's)."""
    # in use may reach into unclaimed anonymous pages (the allocator's mappings not found)
    pool = owned.part(split.owner) + owned.part("anon")
    in_use_part, free_part = pool.take(split.in_use), pool.take(split.free or 0)
    return Share(
        split.in_use, split.free, in_use_part, free_part,
        # heaps and chunks found in a process whose malloc is not glibc's belong to no allocator read here
        owned("anon") + owned("glibc-heap") + owned("mmapped-chunk") + split.unclaimed,
        owned.part("glibc-heap", "mmapped-chunk") + pool - in_use_part - free_part,
        in_use_how=[split.in_use_how], free_how=[split.free_how], source=split.source, detail=split.detail,
        note=split.note)


@dataclass(frozen=True)
class AllocatorSigns:
    """What tells one allocator apart in a process, declared by its reader (``AllocatorReader.signs``):
    memgap.allocators.detect reads the ELF files and maps against every reader's, in the registry's order."""

    api: tuple[str, ...] = ()          # its entry points' unprefixed names: two under one prefix tell it
    api_starts: tuple[str, ...] = ()   # beginnings of names that are its API, unprefixed (gperftools' C API)
    own_symbol: str = ""               # one symbol that alone tells it, unprefixed (the C library's version call)
    gdb_calls: tuple[str, ...] = ()    # the functions --deep calls in it through gdb: their symbols read with the rest
    markers: tuple[bytes, ...] = ()    # messages only it prints, found in a stripped program's .rodata
    libraries: tuple[str, ...] = ()    # beginnings of its shared objects' file names
    path_word: str = ""                # a word anywhere in its objects' paths, asked before the file names
    # the C library every process maps: found beside another only where it serves malloc, told by its
    # file's name only where no other allocator's is mapped
    everywhere: bool = False


@dataclass(frozen=True)
class GdbPlan:
    """Whose own figures gdb reads in the process: the allocator serving malloc, and for jemalloc its mallctl."""

    allocator: str   # jemalloc, tcmalloc, mimalloc
    symbol: str = ""


class DeepFigures(Protocol):
    """An allocator's own figures read through gdb (JemallocDeep, TcmallocDeep, MimallocDeep)."""

    def to_dict(self) -> JsonObject: ...


class RatioBase(Protocol):
    """The base a finding's ratio is taken over (memgap.diagnose.findings.Base)."""

    @property
    def bytes(self) -> int: ...

    @property
    def private(self) -> bool: ...  # the ratio is taken over its own (private) memory, not its RSS

    def part(self, layer: Layer | None, resident: int) -> int: ...  # of a layer's bytes, what weighs against it

    def crossed(self, part: int, share: float) -> bool: ...

    def words(self, part: int, whole: int | None = None) -> str: ...


@dataclass(frozen=True)
class Rules:
    """The thresholds the findings share, handed to a reader by memgap.diagnose (a reader does not
    import diagnose: it sits below it)."""

    floor: int            # bytes under which no finding fires
    retained_floor: int   # ...for address space kept, not resident
    share: float          # of the ratio base
    base: RatioBase
    base_line: str = ""   # the evidence line saying which base the ratio took, where it is not RSS


def deep_figures(snap: Snapshot, route: str, key: str) -> dict[str, Any] | None:
    """An allocator's figures (its ``*Deep.to_dict()``) that ``--deep``'s layers were built from: in the
    allocator_free layer's detail, directly where it serves malloc, under "beside" where a prefixed
    jemalloc sits beside glibc's."""
    layer = snap.layers.get("allocator_free")
    if layer is None:
        return None
    for detail in (layer.detail, layer.detail.get("beside") or {}):
        figures = detail.get(key)
        if detail.get("route") == route and isinstance(figures, dict):
            return figures
    return None


class AllocatorReader:
    """One allocator's reader. ``name`` is the name detection gives it (memgap.sources.allocator);
    every method answers as for an allocator memgap reads nothing of, until a reader overrides it."""

    name = "unknown"
    owner = ""            # the owner label of the regions its own mappings make ("" where it has none told apart)
    deep_key = ""         # the route of its figures read through gdb ("gdb mallctl"), "" for none
    calls: tuple[str, str] = ("", "")  # what --deep and --trim call in it, in words, for messages
    deep_label = ""       # how a failed read through gdb is named in a note (its name where "")
    reads_malloc_info = False  # --deep asks it for malloc_info (glibc's XML report)
    # --deep reads it beside malloc's allocator too (a prefixed jemalloc beside glibc's): its JSON then names
    # which under "<name>_beside"
    read_beside = False
    signs: AllocatorSigns | None = None  # what tells it apart in a process (None: detection never names it)
    # its malloc answers memgap.sources.glibc's calls in this process (mallinfo2, malloc_trim): the trimmer,
    # memgap.api.trim and the pytest plugin's meter make them
    libc_calls = False
    # the lab's variants of its own settings for giving memory back, tried where a workload already runs on it
    # (memgap.lab.choose)
    own_variants: tuple[str, ...] = ()
    # ``library_arenas`` tells a library's bundled copy by its memory alone (no symbol needed): asked of every
    # mapped library where no symbol table is read (a snapshot in the process itself)
    by_memory = False

    # --- from outside, in the process, from the agent ----------------------------------------

    def mappings(self, reader: ProcReader, maps: list[Mapping]) -> list[tuple[int, int]] | None:
        """The mappings this allocator made, sorted, or None where memgap cannot tell them (its
        pages then stay unclaimed anonymous)."""
        return None

    def heaps(self, reader: ProcReader, memmap: MemoryMap, detection: AllocatorDetection) -> GlibcLayout | None:
        """Its heaps walked from outside (read-only), where it has heaps memgap walks."""
        return None

    def walks_heaps(self, detection: AllocatorDetection) -> bool:
        """Whether ``heaps`` finds this allocator's heaps in that process from outside."""
        return False

    def in_process(self, notes: dict[str, str]) -> OwnFigures:
        """Its own statistics in this process; where none, the allocator layers' notes say why."""
        notes["allocator_in_use"] = notes["allocator_free"] = (
            f"allocator {self.name}: memgap reads glibc and jemalloc statistics only")
        return OwnFigures()

    def counts(self, figures: OwnFigures) -> bool:
        """Whether ``figures`` (the agent's) hold this allocator's own counters."""
        return False

    def outside_note(self, detection: AllocatorDetection) -> str:
        """Where it serves malloc: what memgap cannot read of it from outside, and what would."""
        return unread_note(detection, "", False)

    def library_arenas(self, reader: MemoryReader, maps: list[Mapping], found: FoundAllocator) -> list[tuple[int, int]]:
        """Where a copy of this allocator that a library bundles under a prefix (``found``, beside malloc's)
        keeps its memory, read from outside: sorted (start, end) ranges; [] where memgap cannot tell."""
        return []

    def library_release(self, found: FoundAllocator, root: str) -> str | None:
        """The gdb call that gives back what a library's copy of this allocator (``found``) keeps, where gdb
        can make it (its prefixed symbol in the library's symbol tables, read under ``root``); None otherwise."""
        return None

    # --- the layers -----------------------------------------------------------------------------

    def share(self, m: Measurements, owned: Owners) -> Share | None:
        """Its in-use and free bytes from what ``m`` holds of its figures; None where it holds none."""
        return None

    # --- inside, through gdb (--deep, --trim) ----------------------------------------------------

    def deep_plan(self, serving: FoundAllocator, root: str) -> GdbPlan | None:
        """What gdb calls in this allocator serving malloc (None: nothing: --deep reads other
        figures); Unsupported, in one line, where it cannot be called."""
        return None

    def read_deep(self, session: GdbSession, plan: GdbPlan) -> DeepFigures:
        """Its own figures, read through gdb."""
        raise NotImplementedError(self.name)

    def deep_layers(self, layers: dict[str, Layer], rss: int, figures: DeepFigures,
                    beside: str = "") -> tuple[dict[str, Layer], int]:
        """An outside snapshot's layers with its allocator layers from ``figures``, and the unexplained rest."""
        raise NotImplementedError(self.name)

    def deep_table(self, figures: DeepFigures, rss: int, beside: str = "") -> OwnFiguresTable:
        """Its figures read through gdb as rows the terminal shows (``rss``: VmRSS beside them; ``beside``:
        which allocator it is, in words, where it sits beside malloc's)."""
        raise NotImplementedError(self.name)

    def release(self, pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                plan: GdbPlan | None) -> TrimRecord:
        """Its own release call through gdb, VmRSS around it, as a trim record's dict (``plan``: what
        ``deep_plan`` gave for --trim, where it gives one)."""
        from memgap.errors import Unsupported

        raise Unsupported(f"malloc_trim is glibc's: PID {pid} runs {self.name} malloc"
                          + (f" ({before.allocator.library})" if before.allocator.library else ""))

    # --- findings -----------------------------------------------------------------------------------

    def findings(self, snap: Snapshot, rules: Rules) -> list[Finding]:
        """What its figures say of its free memory."""
        return []


def unread_note(detection: AllocatorDetection, api: str, agent_reads: bool) -> str:
    """Where the allocator detected serves malloc and memgap reads nothing of it from outside: why, and
    what would: ``api``, the call gdb makes for its own figures; ``agent_reads``, whether memgap's agent
    reads them."""
    from memgap.documents.allocator import FoundAllocator

    name = detection.name
    serving = detection.found[0] if detection.found else FoundAllocator(name, detection.library)
    # gdb calls a function it finds in .dynsym or .symtab: the allocator's own API unless the program is stripped
    callable_by_gdb = bool(api) and "own messages" not in serving.how
    deep = f"`inspect --deep` (gdb calls {api})" if callable_by_gdb else ""
    if serving.exported and agent_reads:
        return (f"{name} serves malloc: from outside its memory stays under other anonymous; its own "
                "figures come from memgap's agent in the process (memgap run, or memgap agent)"
                + (f" or {deep}" if deep else ", not --deep"))
    why = f"memgap's agent reads no {name} statistics" if api and not agent_reads else \
        "it exports no statistics API that memgap's agent could call"
    return (f"{name} serves malloc: its memory stays under other anonymous ({why}; "
            + (f"its own figures: {deep})" if deep else "--deep reads glibc's malloc_info, and the mallctl, "
               "MallocExtension or mi_process_info of jemalloc, tcmalloc or mimalloc where their symbols are left)"))
