"""The floors every finding weighs its figures against: a byte floor AND a share of the process's
memory, both crossed (Redis's MEMORY DOCTOR lesson: no alarm over a 12x ratio on 9 MB), and the
memory a share is taken of (its RSS, or its own memory where shared pages are most of it).

Apart from the rules, so that ``findings`` (the layers' rules) and ``allocators`` (jemalloc's and
tcmalloc's own figures) share them without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass

from memgap.documents.snapshot import Layer, Snapshot
from memgap.report.units import MiB, mib, pct

FLOOR = 16 * MiB      # below this nothing is worth a warning
SHARE = 0.20          # a layer must hold at least this share of RSS to be called out
RETAINED_FLOOR = 256 * MiB  # address space: cheap until a limit on it (ulimit -v, VSZ alarms) is near
SHARED_MOST = 0.5     # shared pages over this share of RSS: a rule's ratio is taken over private memory


def _resident(snap: Snapshot, name: str) -> int:
    layer = snap.layers.get(name)
    return layer.resident or 0 if layer else 0


def own_memory(snap: Snapshot) -> int:
    """The process's own memory: its private pages (pagemap bit 56) outside shared memory, where its
    layers carry them (from outside); else (in-process) RSS less shared memory and files."""
    measured = {name: layer for name, layer in snap.layers.items() if layer.resident is not None}
    if measured and all(layer.private is not None for layer in measured.values()):
        return sum(layer.private or 0 for name, layer in measured.items() if name != "shared_memory")
    return max(0, snap.rss - _resident(snap, "shared_memory") - _resident(snap, "files"))


@dataclass(frozen=True)
class Base:
    """What a rule's ratio is taken over: the process's RSS; or, where shared pages (shared memory,
    libraries, a parent's pages) are most of its RSS, its own memory, which they would hide (a
    PostgreSQL backend's 20 MiB of free heap is 7% of an RSS of shared buffers, 93% of its own)."""

    bytes: int
    private: bool   # its own memory (own_memory), not its RSS

    def part(self, layer: Layer | None, resident: int) -> int:
        """What of a layer's ``resident`` bytes weighs against this base: over private memory, the
        layer's private pages where read (a free chunk a forked worker shares with its parent is
        not its own), else its bytes."""
        if self.private and layer is not None and layer.private is not None and layer.resident == resident:
            return layer.private
        return resident

    def crossed(self, part: int, share: float) -> bool:
        return part > 0 and part >= share * self.bytes  # nothing of its own is no share of nothing

    def words(self, part: int, whole: int | None = None) -> str:
        """The share, said with its base: "12% of RSS" or "93% of its private memory, 22.4 MiB";
        ``whole``: the layer's bytes, where ``part`` is only its private pages."""
        if not self.private:
            return f"{pct(part, self.bytes)} of RSS"
        mine = f"{mib(part)} MiB of them its own: " if whole is not None and whole != part else ""
        return f"{mine}{pct(part, self.bytes)} of its private memory, {mib(self.bytes)} MiB"


def ratio_base(snap: Snapshot) -> Base:
    """RSS, or the process's own memory where shared pages are most of its RSS."""
    own = own_memory(snap)
    if snap.rss - own > SHARED_MOST * snap.rss:
        return Base(own, True)
    return Base(snap.rss, False)
