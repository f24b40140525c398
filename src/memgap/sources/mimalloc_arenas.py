"""The arenas of a mimalloc linked into a library under a prefix (Arrow's ``arrow_mi_*``), found from outside.

pyarrow's libarrow bundles mimalloc 3 for its default memory pool. mimalloc 3 reserves its memory as
arenas: one anonymous mapping each (1 GiB by default), whose first bytes are the arena's own record
(``mi_arena_t``). Measured on pyarrow 26.0.1 (mimalloc 3, x86-64), its first words are:

    0   the OS allocation's base: the arena's own address
    8   the OS allocation's size in bytes (0x40000000)
    16  the memory's kind and flags
    24  the sub-process the arena belongs to: a record in the library's static data (.bss)
    32  0
    40  its slice count: the size over mimalloc's 64 KiB slices (0x4000)

A mapping is taken as an arena of the library's mimalloc only where every check holds at once: the
first word is the mapping's own address, the second a whole number of 64 KiB slices, that number among
the words after it, and a word among them points into the library's own mappings or the static data
just after them (the sub-process record). The parser holds no offset beyond the first two words, so a
field moved by another mimalloc 3 build is still found; a mimalloc whose record does not start so (2.x
segments) is not taken for one. Read-only: ``MemoryReader.read_memory`` (pread of /proc/PID/mem).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from memgap.sources.procfs import Mapping

SLICE = 64 << 10       # mimalloc 3's arena slice
MIN_ARENA = 32 << 20   # its smallest arena (512 slices: one bitmap chunk)
HEADER = 64            # the bytes of the arena's record read: 8 words


class MemoryReader(Protocol):
    def read_memory(self, address: int, size: int) -> bytes | None: ...


@dataclass(frozen=True)
class MimallocArena:
    """One arena of a bundled mimalloc: where it lies and what tied it to its library."""

    start: int
    size: int          # bytes reserved (the OS allocation's size in its record)
    slices: int        # the slice count its record holds
    subproc: int       # the address in the library's static data its record points to

    @property
    def end(self) -> int:
        return self.start + self.size


def parse_arena_header(raw: bytes, address: int, spans: Sequence[tuple[int, int]]) -> MimallocArena | None:
    """The arena whose record ``raw`` (the first ``HEADER`` bytes at ``address``) is, where every check
    of the module's docstring holds; None otherwise (another mapping's bytes)."""
    if len(raw) < HEADER:
        return None
    words = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, HEADER, 8)]
    base, size = words[0], words[1]
    if base != address or size < MIN_ARENA or size % SLICE or size >= 1 << 47:
        return None
    slices = size // SLICE
    if slices not in words[2:]:
        return None
    subproc = next((w for w in words[2:] if any(lo <= w < hi for lo, hi in spans)), None)
    return MimallocArena(address, size, slices, subproc) if subproc is not None else None


def library_spans(maps: Sequence[Mapping], library: str) -> list[tuple[int, int]]:
    """Where ``library`` lies in the process: each run of its mappings, with the anonymous mapping right
    after its last one (its .bss beyond the file's pages)."""
    spans: list[tuple[int, int]] = []
    ordered = sorted(maps, key=lambda m: m.start)
    for i, m in enumerate(ordered):
        if m.path != library:
            continue
        end = m.end
        after = ordered[i + 1] if i + 1 < len(ordered) else None
        if after is not None and not after.path and after.start == m.end:
            end = after.end
        if spans and spans[-1][1] >= m.start:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((m.start, end))
    return spans


def find_arenas(reader: MemoryReader, maps: Sequence[Mapping], library: str) -> list[MimallocArena]:
    """The arenas of the mimalloc bundled in ``library``: each private anonymous mapping large enough
    for one read at its start (``HEADER`` bytes) and parsed."""
    spans = library_spans(maps, library)
    if not spans:
        return []
    arenas = []
    for m in maps:
        if m.path or m.end - m.start < MIN_ARENA or not m.perms.startswith("rw") or m.perms[3:4] != "p":
            continue
        raw = reader.read_memory(m.start, HEADER)
        arena = parse_arena_header(raw, m.start, spans) if raw else None
        if arena is not None:
            arenas.append(arena)
    return arenas
