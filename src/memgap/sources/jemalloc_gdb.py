"""jemalloc's own figures in another process, read through gdb by calling its ``mallctl``.

One job: which ``mallctl`` to call (the prefix detection found), the calls, and
their results, for ``inspect --deep`` and ``--trim`` of a process whose malloc
is jemalloc. ``GdbSession`` (gdb_attach) attaches, bounds every step in time and
always lets go; what the figures mean for the layers is ``attribution``'s.

How a value comes back: ``mallctl(name, oldp, oldlenp, newp, newlen)`` writes
into ``oldp``, which must be memory of the process. memgap mallocs one block
there (through the process's own malloc, freed before detaching), lays out one
slot per name (value, length, return code), writes the lengths, runs all the
calls of a batch in one gdb expression, and reads the block back in one read:
three round trips per batch instead of three per name. jemalloc checks each
length against the type it writes (size_t, unsigned, ssize_t, bool), so every
name carries its size. Laying out and decoding the slots are pure functions.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from memgap.documents.json_value import JsonObject
from memgap.documents.routes import MALLCTL
from memgap.errors import MalformedInput, Unsupported
from memgap.sources.elf import SymbolQuery, read_elf

if TYPE_CHECKING:  # attribution imports the figures in-process too: no gdb machinery there
    from memgap.sources.gdb_attach import GdbSession

ROUTE = MALLCTL
MALLCTL_ARENAS_ALL = 4096   # "all arenas" in stats.arenas.<i> and arena.<i>.purge (jemalloc 5)
SLOT = 24                   # value (8), length (8), return code (4), padding (4)
PER_EXPRESSION = 64         # calls in one gdb expression (a process may have hundreds of arenas)
NOT_RUN = -1                # a return code slot the call never wrote
TOTALS = ("allocated", "active", "resident", "retained", "mapped", "metadata")


@dataclass(frozen=True)
class Ctl:
    """One mallctl name and the size of the value jemalloc writes for it."""

    name: str
    size: int = 8
    signed: bool = False
    write: bool = False     # also write the slot's value (``epoch``: any write refreshes the counters)


def totals_batch() -> list[Ctl]:
    """The first batch: refresh the counters, then the process-wide figures and options."""
    return [Ctl("epoch", 8, write=True),
            *(Ctl(f"stats.{name}") for name in TOTALS),
            Ctl("arenas.narenas", 4), Ctl("arenas.page"),
            Ctl(f"stats.arenas.{MALLCTL_ARENAS_ALL}.pdirty"), Ctl(f"stats.arenas.{MALLCTL_ARENAS_ALL}.pmuzzy"),
            Ctl("opt.dirty_decay_ms", signed=True), Ctl("opt.muzzy_decay_ms", signed=True),
            Ctl("opt.background_thread", 1), Ctl("background_thread", 1)]


def arenas_batch(narenas: int) -> list[Ctl]:
    """Each arena's dirty pages: an arena never used answers ENOENT and is left out. (jemalloc
    makes 4 arenas per CPU, most never used: the rest is asked of the used ones only.)"""
    return [Ctl(f"stats.arenas.{i}.pdirty") for i in range(narenas)]


def arena_detail_batch(used: list[int]) -> list[Ctl]:
    """The used arenas' muzzy pages and decay times."""
    out = []
    for i in used:
        out += [Ctl(f"stats.arenas.{i}.pmuzzy"), Ctl(f"arena.{i}.dirty_decay_ms", signed=True),
                Ctl(f"arena.{i}.muzzy_decay_ms", signed=True)]
    return out


# --- the slots (pure) --------------------------------------------------------------------

def encode_slots(ctls: list[Ctl]) -> bytes:
    """The block's initial bytes: each slot's value (1 for a write), its length, NOT_RUN."""
    return b"".join(int(c.write).to_bytes(8, "little") + c.size.to_bytes(8, "little")
                    + NOT_RUN.to_bytes(4, "little", signed=True) + bytes(4) for c in ctls)


def batch_expression(symbol: str, ctls: list[Ctl], names: list[int], block: int) -> str:
    """One gdb expression calling ``symbol`` for every name, each return code stored in its slot."""
    calls = []
    for i, (ctl, name) in enumerate(zip(ctls, names, strict=True)):
        value, length, rc = block + SLOT * i, block + SLOT * i + 8, block + SLOT * i + 16
        new, new_len = (value, ctl.size) if ctl.write else (0, 0)
        calls.append(f"(*(int *) {rc} = (int) {symbol}((char *) {name}, (void *) {value}, "
                     f"(unsigned long *) {length}, (void *) {new}, {new_len}))")
    return ", ".join(calls)


def decode_slots(raw: bytes, ctls: list[Ctl]) -> dict[str, int | None]:
    """Each name's value, or None where mallctl returned an error (or never ran)."""
    if len(raw) != SLOT * len(ctls):
        raise MalformedInput("mallctl slots", f"{len(raw)} bytes for {len(ctls)} names")
    out: dict[str, int | None] = {}
    for i, ctl in enumerate(ctls):
        slot = raw[SLOT * i:SLOT * (i + 1)]
        rc = int.from_bytes(slot[16:20], "little", signed=True)
        out[ctl.name] = int.from_bytes(slot[:ctl.size], "little", signed=ctl.signed) if rc == 0 else None
    return out


# --- the figures ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ArenaPages:
    """One arena's unused pages, and how soon jemalloc gives them back on its own."""

    index: int
    pdirty: int                 # pages freed, still resident: a purge returns them now
    pmuzzy: int                 # pages MADV_FREE'd: resident until the kernel needs them
    dirty_decay_ms: int | None  # -1: never purged on its own
    muzzy_decay_ms: int | None


@dataclass(frozen=True)
class JemallocDeep:
    """What jemalloc says of itself, read through gdb at one moment (after an ``epoch`` refresh)."""

    symbol: str                 # the mallctl called: "mallctl", "je_mallctl"...
    allocated: int              # bytes handed to the program
    active: int                 # bytes of pages holding them (allocated plus slack within those pages)
    resident: int               # active pages + dirty pages + metadata pages, as jemalloc counts them
    retained: int               # address space kept mapped but given back (virtual, not resident)
    mapped: int
    metadata: int
    page: int
    narenas: int
    arenas: tuple[ArenaPages, ...]   # the arenas in use
    all_pdirty: int | None = None    # stats.arenas.<ALL>: the merged count, beside the arenas' sum
    all_pmuzzy: int | None = None
    dirty_decay_ms: int | None = None  # opt.*: the defaults an arena starts with
    muzzy_decay_ms: int | None = None
    background_thread: bool | None = None     # opt.background_thread
    background_thread_on: bool | None = None  # background_thread: what it is now (a program may switch it on)

    @property
    def dirty_bytes(self) -> int:
        return sum(a.pdirty for a in self.arenas) * self.page

    @property
    def muzzy_bytes(self) -> int:
        return sum(a.pmuzzy for a in self.arenas) * self.page

    @property
    def purgeable(self) -> int:
        """Resident bytes ``arena.<ALL>.purge`` gives back now: dirty and muzzy pages."""
        return self.dirty_bytes + self.muzzy_bytes

    @property
    def page_slack(self) -> int:
        """Free bytes inside pages that also hold allocations (active - allocated)."""
        return max(0, self.active - self.allocated)

    @property
    def metadata_resident(self) -> int:
        """jemalloc's resident pages that are neither active nor dirty: its metadata's (at most
        stats.metadata)."""
        return max(0, min(self.metadata, self.resident - self.active - self.dirty_bytes))

    def to_dict(self) -> JsonObject:
        out = asdict(self)
        out["route"] = ROUTE
        out.update(dirty_bytes=self.dirty_bytes, muzzy_bytes=self.muzzy_bytes, purgeable=self.purgeable,
                   page_slack=self.page_slack, metadata_resident=self.metadata_resident)
        return out


def figures(symbol: str, totals: dict[str, int | None], arenas: dict[str, int | None]) -> JemallocDeep:
    """The two batches' values as one JemallocDeep; Unsupported where jemalloc keeps no statistics."""
    missing = [n for n in (*(f"stats.{t}" for t in TOTALS), "arenas.narenas", "arenas.page") if totals.get(n) is None]
    if missing:
        raise Unsupported(f"jemalloc's {symbol} answered no {', '.join(missing)} "
                          "(a jemalloc built without --enable-stats?)")
    narenas = int(totals["arenas.narenas"] or 0)
    used = tuple(ArenaPages(i, int(arenas[f"stats.arenas.{i}.pdirty"] or 0),
                            int(arenas.get(f"stats.arenas.{i}.pmuzzy") or 0),
                            arenas.get(f"arena.{i}.dirty_decay_ms"), arenas.get(f"arena.{i}.muzzy_decay_ms"))
                 for i in range(narenas) if arenas.get(f"stats.arenas.{i}.pdirty") is not None)
    flag = {k: None if totals.get(k) is None else bool(totals[k])
            for k in ("opt.background_thread", "background_thread")}
    allocated, active, resident, retained, mapped, metadata = (int(totals[f"stats.{t}"] or 0) for t in TOTALS)
    return JemallocDeep(
        symbol, allocated, active, resident, retained, mapped, metadata, page=int(totals["arenas.page"] or 0),
        narenas=narenas, arenas=used,
        all_pdirty=totals.get(f"stats.arenas.{MALLCTL_ARENAS_ALL}.pdirty"),
        all_pmuzzy=totals.get(f"stats.arenas.{MALLCTL_ARENAS_ALL}.pmuzzy"),
        dirty_decay_ms=totals.get("opt.dirty_decay_ms"), muzzy_decay_ms=totals.get("opt.muzzy_decay_ms"),
        background_thread=flag["opt.background_thread"], background_thread_on=flag["background_thread"])


# --- which mallctl, and the calls --------------------------------------------------------------

def mallctl_symbol(found: dict[str, Any], query: SymbolQuery, root: str = "") -> str:
    """The name of the mallctl to call for one found allocator (``FoundAllocator.to_dict()``).

    Its prefix as detection found it ("" for Debian's libjemalloc or a program that links
    jemalloc in, "je_"...). gdb finds a function by .dynsym or .symtab: one that is in
    neither (a stripped program) cannot be called, and neither can a prefix not known. ``query`` is
    the one detection read the object with: it asks about every name ending in mallctl.
    """
    prefix, library = found.get("prefix") or "", found.get("library") or ""
    if prefix == "?":
        raise Unsupported(f"jemalloc in {library} has its symbols stripped: memgap cannot call its mallctl")
    symbol = f"{prefix}mallctl"
    try:
        defined = read_elf(root + library, query).defined
    except (OSError, MalformedInput) as exc:
        raise Unsupported(f"cannot read jemalloc's object {library} to find its mallctl ({exc})") from None
    if symbol not in defined:
        raise Unsupported(f"jemalloc in {os.path.basename(library)} defines no {symbol} symbol "
                          "(stripped, or built under another prefix): memgap cannot call it")
    return symbol


def _run_batch(session: GdbSession, symbol: str, ctls: list[Ctl], what: str) -> dict[str, int | None]:
    from memgap.sources.gdb_errors import CallFailed

    names = session.put_strings(*(c.name for c in ctls))
    block = session.alloc(SLOT * len(ctls))
    session.write_memory(block, encode_slots(ctls))
    try:
        for i in range(0, len(ctls), PER_EXPRESSION):
            part = slice(i, i + PER_EXPRESSION)
            session.call(batch_expression(symbol, ctls[part], names[part], block + SLOT * i), what)
    except CallFailed as exc:
        if "No symbol" in exc.gdb_message:
            raise Unsupported(f"gdb finds no {symbol} in the process: {exc.gdb_message.strip()[:80]}") from None
        raise
    return decode_slots(session.read_memory(block, SLOT * len(ctls)), ctls)


def read_jemalloc(session: GdbSession, symbol: str) -> JemallocDeep:
    """Refresh jemalloc's counters (``epoch``) and read them, then each used arena's pages and decay."""
    totals = _run_batch(session, symbol, totals_batch(), "mallctl totals")
    if totals.get("epoch") is None and totals.get("stats.allocated") is None:
        raise Unsupported(f"jemalloc's {symbol} answered none of the names asked (not jemalloc 5?)")
    narenas = int(totals.get("arenas.narenas") or 0)
    arenas = _run_batch(session, symbol, arenas_batch(narenas), "mallctl arenas") if narenas else {}
    used = [i for i in range(narenas) if arenas.get(f"stats.arenas.{i}.pdirty") is not None]
    if used:
        arenas.update(_run_batch(session, symbol, arena_detail_batch(used), "mallctl arena detail"))
    return figures(symbol, totals, arenas)


def purge(session: GdbSession, symbol: str) -> int:
    """``mallctl("arena.<ALL>.purge", NULL, NULL, NULL, 0)``: every arena's dirty and muzzy pages
    given back now (the call memgap's native agent makes); mallctl's return code."""
    (name,) = session.put_strings(f"arena.{MALLCTL_ARENAS_ALL}.purge")
    return session.call_int(f"(int) {symbol}((char *) {name}, (void *) 0, (unsigned long *) 0, (void *) 0, 0)",
                            "mallctl purge")
