"""jemalloc: its own counters (mallctl's stats, in this process or by the agent: memgap.sources.jemalloc)
placed in its mappings (private anonymous MAP_NORESERVE ones, told by smaps' VmFlags); through gdb,
its mallctl read and its arenas purged (memgap.sources.jemalloc_gdb); its findings on dirty pages and
retained address space.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.base import (
    AllocatorReader,
    OwnFigures,
    Share,
    Split,
    counted_share,
    unread_note,
    within_mappings,
)
from memgap.errors import MemgapError, Unsupported
from memgap.explain.measured import Measurements, Owners

if TYPE_CHECKING:
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.jemalloc import JemallocStats
    from memgap.sources.procfs import Mapping, ProcReader

OWNER = "jemalloc"
# pid -> MAP_NORESERVE flag of each private anonymous mapping, as last read from smaps
_NORESERVE: dict[int, dict[tuple[int, int], bool]] = {}


class Jemalloc(AllocatorReader):
    name = "jemalloc"
    owner = OWNER

    def mappings(self, reader: ProcReader, maps: list[Mapping]) -> list[tuple[int, int]] | None:
        try:  # see sources.jemalloc.jemalloc_mappings
            return _noreserve_mappings(reader, maps)
        except MemgapError:
            return None

    def in_process(self, notes: dict[str, str]) -> OwnFigures:
        from memgap.sources.jemalloc import read_jemalloc_stats

        try:
            return OwnFigures(jemalloc=read_jemalloc_stats())
        except Unsupported as exc:
            notes["allocator_in_use"] = notes["allocator_free"] = str(exc)
            return OwnFigures()

    def counts(self, figures: OwnFigures) -> bool:
        return figures.jemalloc is not None

    def outside_note(self, detection: AllocatorDetection) -> str:
        return unread_note(detection, "its mallctl", True)

    def share(self, m: Measurements, owned: Owners) -> Share | None:
        return counted_share(_jemalloc_split(m.jemalloc, owned), owned) if m.jemalloc is not None else None


def _noreserve_mappings(reader: ProcReader, maps: list[Mapping]) -> list[tuple[int, int]]:
    """The private anonymous mappings with MAP_NORESERVE, sorted.

    smaps walks every page table (15 ms for a 200 MiB process here, maps under 1 ms), and
    a mapping keeps the flag its mmap() gave it for life, splits included: smaps is read
    again only when maps shows a private anonymous range it has not seen.
    """
    from memgap.sources.jemalloc import noreserve_flags

    anon = [(m.start, m.end) for m in maps if not m.is_file and not m.path and m.perms[3] == "p"]
    known = _NORESERVE.get(reader.numeric_pid)
    if known is None or any(r not in known for r in anon):
        known = noreserve_flags(reader.smaps())
        if len(_NORESERVE) >= 64:  # processes seen by a long recording: forget the oldest
            del _NORESERVE[next(iter(_NORESERVE))]
        _NORESERVE[reader.numeric_pid] = known
    return sorted(r for r in anon if known.get(r))


def _jemalloc_split(j: JemallocStats, owned: Owners) -> Split:
    # every byte jemalloc maps (stats.mapped) must fit in the mappings found
    virtual = owned.virtual.get(OWNER, 0)
    found = owned.count.get(OWNER, 0) > 0 and virtual >= j.mapped
    in_use, free, unclaimed = within_mappings(OWNER, owned, j.allocated, j.free_bound, found)
    where = "resident pages of jemalloc's own mappings (private anonymous MAP_NORESERVE ones: smaps " \
            "VmFlags 'nr'; pages from pagemap)"
    detail = {"allocated": j.allocated, "active": j.active, "resident": j.resident, "muzzy": j.muzzy,
              "retained": j.retained, "mapped": j.mapped, "metadata": j.metadata, "narenas": j.narenas,
              "mappings": owned.count.get(OWNER, 0), "mappings_virtual": virtual,
              "mappings_resident": owned(OWNER),
              # what stats.resident (plus muzzy pages) claims beyond the resident pages found
              "counted_not_resident": max(0, j.resident + j.muzzy - owned(OWNER)) if found else None}
    return Split(
        OWNER, in_use, free, unclaimed,
        in_use_how=f"jemalloc stats.allocated, within the {where}" if found
        else "jemalloc stats.allocated, within unclaimed anonymous pages",
        free_how=f"{where} minus the in-use bytes, at most stats.resident + muzzy pages - stats.allocated "
                 "(jemalloc's own upper bound: dirty pages, page slack, metadata)",
        source="jemalloc stats, smaps, pagemap", detail={"jemalloc": detail},
        note="" if found else f"jemalloc's mappings not found (MAP_NORESERVE mappings: {virtual} bytes for "
                              f"stats.mapped {j.mapped}; vm.overcommit_memory 2?): its free pages are not "
                              "measured and stay in other_anon")


READER = Jemalloc()
