"""Where the JVM's reservations lie in a process's maps, found by their shapes.

HotSpot reserves each of its areas with one mmap of a size it knows (the Java heap: -Xmx; the
compressed class space: CompressedClassSpaceSize; the code cache: ReservedCodeCacheSize) and
commits parts of it as it grows: in /proc/PID/maps a reservation is a run of adjacent private
anonymous pieces, read-write (or read-write-execute for code) where committed and ``---p`` where
only reserved. Given the size (from the perf data or the flags) and the committed bytes, the run
whose window of that size starts and ends on mapping boundaries and whose writable bytes come
closest to the committed bytes is the reservation. Pure: mappings in, ranges out.

Limits: a reservation merged by the kernel with a neighbour of the same permissions has a boundary
that maps do not show; the window is then tried from its other end. JDK 17 maps part of its CDS
archive (classes.jsa) into the top of the Java heap: those private file pieces count as the heap's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import pairwise

from memgap.sources.procfs import Mapping

MiB = 1 << 20
CODE_CACHE_DEFAULTS = (240 * MiB, 48 * MiB)  # ReservedCodeCacheSize: tiered (segmented or not); C2 or C1 only
METASPACE_NODE = 64 * MiB                    # JDK 16+: metaspace reserves non-class space in 64 MiB nodes
_ARCHIVE_HEAD = 64 << 10                     # a CDS archive's first region starts within its first pages


def _anon_private(m: Mapping) -> bool:
    return not m.is_file and not m.path.startswith("[") and m.perms[3] == "p"


def heap_piece(m: Mapping) -> bool:
    """A piece of the Java heap's reservation: private anonymous, or JDK 17's archived heap regions."""
    if m.perms[3] != "p" or "x" in m.perms:
        return False
    return _anon_private(m) or (m.is_file and m.path.endswith(".jsa"))


def data_piece(m: Mapping) -> bool:
    """A piece of a data reservation (class space, metaspace): private anonymous, not executable."""
    return _anon_private(m) and "x" not in m.perms


def code_piece(m: Mapping) -> bool:
    """A piece of the code cache: private anonymous, read-write-execute where committed."""
    return _anon_private(m) and m.perms in ("rwxp", "---p")


def runs(maps: Iterable[Mapping], eligible: Callable[[Mapping], bool]) -> list[list[Mapping]]:
    """Adjacent eligible mappings, grouped (each group contiguous in the address space)."""
    out: list[list[Mapping]] = []
    for m in sorted(maps, key=lambda x: x.start):
        if not eligible(m):
            continue
        if out and out[-1][-1].end == m.start:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def writable_bytes(run: list[Mapping], start: int, end: int) -> int:
    """Bytes of ``run``'s writable pieces inside [start, end)."""
    return sum(max(0, min(m.end, end) - max(m.start, start)) for m in run if m.perms[1] == "w")


def find_reservation(maps: Iterable[Mapping], size: int, committed: int | None,
                     eligible: Callable[[Mapping], bool],
                     exclude: Iterable[tuple[int, int]] = ()) -> tuple[int, int] | None:
    """[start, end) of the reservation of ``size`` bytes: the one window of that size that starts on
    a piece's start and ends on a piece's end (none overlapping ``exclude``); among several, the one
    whose writable bytes are closest to ``committed`` (within a tenth of it, or 4 MiB), or without
    ``committed`` the most written (a heap of -Xmx1g beside a class space of 1 GiB: the heap holds
    megabytes where the class space holds kilobytes). Failing any such window, the same among windows
    with one boundary where the other falls inside a reserved (``---p``) piece. The writable bytes
    only choose between windows: G1 uncommits concurrently, so its maps lag its committed figure."""
    if size <= 0:
        return None
    pieces, taken = list(maps), list(exclude)
    for both_ends in (True, False):
        found = [(writable_bytes(run, s, s + size), s) for run in runs(pieces, eligible)
                 for s in _windows(run, size, both_ends)
                 if not any(s < high and low < s + size for low, high in taken)]
        if len(found) > 1 and committed is not None:
            slack = max(4 * MiB, committed // 10)
            close = [(abs(w - committed), s) for w, s in found if abs(w - committed) <= slack]
            found = [(0, min(close)[1])] if close else []
        if found:
            return max(found)[1], max(found)[1] + size
    return None


def _windows(run: list[Mapping], size: int, both_ends: bool) -> set[int]:
    """Starts of the windows of ``size`` in ``run`` bounded by pieces (see find_reservation)."""
    starts = {m.start for m in run}
    ends = {m.end for m in run}
    low, high = run[0].start, run[-1].end
    if both_ends:
        return {s for s in starts if s + size in ends}
    out = set()
    for s in starts:
        if s + size <= high and _inside_reserved(run, s + size):
            out.add(s)
    for e in ends:
        if e - size >= low and _inside_reserved(run, e - size):
            out.add(e - size)
    return out


def _inside_reserved(run: list[Mapping], address: int) -> bool:
    return any(m.start < address < m.end and m.perms.startswith("---") for m in run)


def code_cache(maps: list[Mapping], reserved: int | None) -> tuple[int, int] | None:
    """The code cache's reservation: ReservedCodeCacheSize where told (else HotSpot's defaults),
    among runs holding read-write-execute pieces; failing that, the run with the most of them,
    from its first such piece to its last."""
    with_code = [run for run in runs(maps, code_piece) if any(m.perms == "rwxp" for m in run)]
    if not with_code:
        return None
    for size in ((reserved,) if reserved else CODE_CACHE_DEFAULTS):
        found = find_reservation([m for run in with_code for m in run], size, None, code_piece)
        if found is not None:
            return found
    best = max(with_code, key=lambda run: sum(m.size for m in run if m.perms == "rwxp"))
    code = [m for m in best if m.perms == "rwxp"]
    return code[0].start, code[-1].end


def first_metaspace_node(maps: list[Mapping]) -> tuple[int, int] | None:
    """The 64 MiB node of non-class metaspace that HotSpot (JDK 16 and later, with CDS) reserves just
    below its CDS archive: a run of private anonymous pieces ending where the archive's first region
    (its file's first pages, past the header) begins. The archived heap regions JDK 17 maps into the
    Java heap come from far into the file, and are not taken for it."""
    ordered = sorted(maps, key=lambda m: m.start)
    for i, m in enumerate(ordered):
        if not (m.is_file and m.path.endswith(".jsa") and m.offset < _ARCHIVE_HEAD) or i == 0:
            continue
        start = m.start - METASPACE_NODE
        below = [p for p in ordered[:i] if p.end > start]
        if below and below[0].start <= start and all(data_piece(p) for p in below) \
                and all(a.end == b.start for a, b in pairwise(below)) and below[-1].end == m.start \
                and any(p.perms[1] == "w" for p in below):
            return start, m.start
    return None
