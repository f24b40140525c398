"""Where each loaded object's static data (its ``.bss``) lies in a process: the ranges, from its program
headers and its load address, or, where its file cannot be read, a likely range from the maps alone.

An object's load base is where its mapping at file offset 0 starts, less its first PT_LOAD's page-aligned
``p_vaddr``; each segment whose ``p_memsz`` exceeds its ``p_filesz`` has its zero-filled pages at
``[page_up(base + p_vaddr + p_filesz), page_up(base + p_vaddr + p_memsz))``: the loader maps them
anonymous, and the kernel may merge that mapping with an anonymous neighbour, so only the computed range
is the object's, clipped to the anonymous mappings it lies in (the last page of the file's bytes is a
private copy of a file page: it stays with the file's mapping).

Where the file is not read (another mount namespace it cannot be seen from, a file deleted or replaced
since it was loaded, captured maps without their files), an anonymous ``rw-p`` mapping that starts
exactly where one of the object's writable file mappings ends is its likely static data: said as likely
(``from_elf`` false), never as read.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from memgap.errors import MalformedInput
from memgap.sources.elf_segments import LoadSegment, read_segments
from memgap.sources.procfs import PAGE_SIZE, Mapping, shared_memory_kind

# ``read(path)``: its PT_LOAD segments and its inode; OSError where not readable, MalformedInput where no ELF
ReadSegments = Callable[[str], tuple[tuple[LoadSegment, ...], int]]
STATIC_DATA, STATIC_LIKELY = "static-data", "static-likely"  # the owners of their regions (explain.snapshot)
LIKELY = "from maps: adjacent to its writable segment; the ELF file not read"


@dataclass(frozen=True)
class StaticRange:
    """Part of one object's static data: [start, end) inside an anonymous mapping."""

    start: int
    end: int
    path: str        # the object, as maps names it
    from_elf: bool   # True: placed by its program headers; False: likely, from the maps alone (LIKELY)


def _page_up(address: int, page: int) -> int:
    return -(-address // page) * page


def bss_ranges(segments: tuple[LoadSegment, ...], base: int, page: int = PAGE_SIZE) -> list[tuple[int, int]]:
    """The zero-filled pages of each segment loaded at ``base``: [page_up(end of its file bytes),
    page_up(end of its memory))."""
    out = []
    for s in segments:
        lo, hi = _page_up(base + s.vaddr + s.filesz, page), _page_up(base + s.vaddr + s.memsz, page)
        if lo < hi:
            out.append((lo, hi))
    return out


def load_base(segments: tuple[LoadSegment, ...], start: int, page: int = PAGE_SIZE) -> int:
    """Where an object was loaded: the start of its mapping at file offset 0 less its first PT_LOAD's
    page-aligned virtual address."""
    first = min(segments, key=lambda s: s.vaddr)
    return start - first.vaddr // page * page


def _objects(maps: list[Mapping]) -> dict[tuple[str, int], list[Mapping]]:
    """The file mappings of each object mapped executable (a library, the program), by (path, inode)."""
    groups: dict[tuple[str, int], list[Mapping]] = {}
    for m in maps:
        if m.inode and m.path.startswith("/"):
            groups.setdefault((m.path, m.inode), []).append(m)
    return {key: group for key, group in groups.items()
            if any("x" in m.perms for m in group) and not shared_memory_kind(key[0])}


def _from_elf(group: list[Mapping], segments: tuple[LoadSegment, ...], page: int) -> list[tuple[int, int]]:
    """The object's bss ranges for each of its loads (its mappings at offset 0); a load whose file
    mappings do not end where its segments' file bytes do is not one the loader made: skipped."""
    ends = {m.end for m in group}
    out = []
    for m in group:
        if m.offset != 0 or not segments:
            continue
        base = load_base(segments, m.start, page)
        ranges = bss_ranges(segments, base, page)
        if all(s.filesz == 0 or _page_up(base + s.vaddr + s.filesz, page) in ends
               for s in segments if s.memsz > s.filesz):
            out.extend(ranges)
    return out


def _likely(group: list[Mapping], anon_at: dict[int, Mapping]) -> list[tuple[int, int]]:
    """The anonymous rw-p mappings that start where one of the object's writable private mappings ends."""
    out = []
    for m in group:
        after = anon_at.get(m.end)
        if m.perms[1] == "w" and m.perms[3] == "p" and after is not None and after.perms == "rw-p":
            out.append((after.start, after.end))
    return out


def _clip(ranges: list[tuple[int, int]], anon: list[Mapping], starts: list[int]) -> list[tuple[int, int]]:
    """The parts of ``ranges`` inside anonymous mappings."""
    out = []
    for lo, hi in ranges:
        for m in anon[max(0, bisect.bisect_right(starts, lo) - 1):bisect.bisect_left(starts, hi)]:
            a, b = max(lo, m.start), min(hi, m.end)
            if a < b:
                out.append((a, b))
    return out


def static_ranges(maps: list[Mapping], read: ReadSegments, page: int = PAGE_SIZE) -> list[StaticRange]:
    """Every loaded object's static data in the anonymous mappings of ``maps``, sorted; ``read(path)``
    gives an object's segments (see ``ReadSegments``): an object that is no ELF file has none, one whose
    file cannot be read (or is another file now) gets the likely range from the maps."""
    anon = sorted((m for m in maps if not m.is_file and not m.is_special and not m.path.startswith("[stack")),
                  key=lambda m: m.start)
    starts = [m.start for m in anon]
    anon_at = {m.start: m for m in anon if not m.path}
    out = []
    for (path, inode), group in _objects(maps).items():
        try:
            segments, file_inode = read(path)
        except MalformedInput:
            continue  # no ELF file (or a damaged one): no static data to tell
        except OSError:  # not visible from here, or gone
            segments, file_inode = (), None
        if file_inode == inode:
            out += [StaticRange(lo, hi, path, True) for lo, hi in _clip(_from_elf(group, segments, page), anon, starts)]
        else:
            out += [StaticRange(lo, hi, path, False) for lo, hi in _likely(group, anon_at)]
    return sorted(out, key=lambda r: r.start)


def read_static_ranges(maps: list[Mapping], root: str = "") -> list[StaticRange]:
    """``static_ranges`` with each object's file read under ``root`` (/proc/PID/root for a process in
    another mount namespace; "" for this one's)."""
    return static_ranges(maps, lambda path: read_segments(root + path))
