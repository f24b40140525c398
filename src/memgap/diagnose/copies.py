"""Forked workers that copied their parent's pages, said in the words of the cause (pure: figures in,
one finding out). ``inspect --tree``, ``memgap run`` and the lab each measure what a worker copied
(memgap.explain.cow) and hand it here; where the lab measured the copies again with the collector
frozen at each fork, that measurement names the cause:

- the **collector**: a full collection in a worker (or in its parent after the fork) writes into the
  header of every object it tracks, on every page that holds one. Freezing the collector at fork
  (``gc.freeze()``) stops it, and the copies with it.
- **reads**: every read of a Python object writes its reference count, so a worker that reads the
  parent's objects copies each page it reads, whatever the collector does. Only a change to the code
  removes them: the data in a few large buffers that hold no Python object per item, or workers
  started before the data is built. Those are advice, not measured here.

Without that measurement both causes are possible, and the finding says both; unless ``memgap run``'s
bootstrap counted no full collection in the workers nor in their parent since the fork (memgap._hook's
gc callback, in each process it started from its first fork on): then the collector did not walk the
parent's objects in them, and their copies are the reads.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memgap.diagnose.floors import FLOOR, SHARE
from memgap.documents.snapshot import CowSplit, Finding
from memgap.report.units import MiB, mib, pct

CODE = "copied-from-parent"
PYTHON_GROUP = "Python objects (pymalloc arenas)"  # memgap.explain.cow.OWNER_GROUPS' name for pymalloc's arenas
FREEZE_SPEC = "glibc:gc=freeze-at-fork"
REMOVED_SHARE = 0.5  # the collector frozen at fork removed at least this share of the copies: its writes were them

READS = "by reading them (reference counts are written on every read)"
COLLECTOR = "by collecting them (a full collection writes into every object it tracks)"
FREEZE_REMEDY = ("freeze the collector at fork (gc.disable() early in the parent, gc.freeze() before each fork, "
                 "gc.enable() in the child; `memgap lab --variant glibc:gc=freeze-at-fork` measures it on your tree)")
READS_REMEDY = ("reads copy whatever they touch, the collector frozen or not; what removes them is a change to the "
                "code (advice, not measured): keep the data in a few large buffers that hold no Python object per "
                "item (numpy or Arrow arrays; strings as one bytes buffer with an array of offsets), or start the "
                "workers before the data is built, each loading its own share")


@dataclass(frozen=True)
class WorkerCopies:
    """One forked process's copies: its split (memgap.explain.cow), its private memory then (USS), and
    where it was measured over time, (seconds, what read it, copied bytes), oldest first."""

    pid: int
    split: CowSplit
    private: int
    series: Sequence[tuple[float, str, int]] = field(default_factory=tuple)
    # full collections in it and in its parent since the fork, as memgap's bootstrap counted them (memgap run);
    # None where nothing counted them
    collections: int | None = None


@dataclass(frozen=True)
class FrozenCopies:
    """The lab's measurement that tells the causes apart: the workers' copies summed, in the baseline's
    runs and with the collector frozen at fork (medians over its runs)."""

    baseline: int
    frozen: int
    spec: str = FREEZE_SPEC

    @property
    def collector(self) -> bool:
        """Whether the collector's writes were the copies: freezing it removed most of them."""
        return self.baseline > 0 and self.baseline - self.frozen >= REMOVED_SHARE * self.baseline


def copies_finding(workers: Sequence[WorkerCopies], frozen: FrozenCopies | None = None) -> Finding | None:
    """The finding on a tree's forked workers that copied their parent's pages (at least FLOOR, and
    SHARE of their private memory), None where they copied less."""
    copying = [w for w in workers if w.split.copied]
    copied = sum(w.split.copied for w in copying)
    private = sum(w.private for w in copying)
    if copied < FLOOR or not private or copied < SHARE * private:
        return None
    groups: dict[str, int] = {}
    for w in copying:
        for group, n in w.split.by_group.items():
            groups[group] = groups.get(group, 0) + n
    python = groups.get(PYTHON_GROUP, 0)
    summary, remedy = _words(copying, copied, private, python, frozen)
    return Finding(CODE, "warning", summary, _evidence(copying, groups, frozen), remedy)


def _words(copying: Sequence[WorkerCopies], copied: int, private: int, python: int,
           frozen: FrozenCopies | None) -> tuple[str, str]:
    """The summary and the remedy, by the cause the figures show."""
    each = [w.split.copied for w in copying]
    who = f"{len(copying)} worker{'s' * (len(copying) != 1)}"
    spread = f" ({mib(min(each))}-{mib(max(each))} MiB)" if len(each) > 1 and max(each) - min(each) >= FLOOR else ""
    share = f"{pct(copied, private)} of their private memory"
    if python < copied / 2:  # not Python's objects: C memory the parent filled, written after the fork
        return (f"{who} copied {mib(copied)} MiB of their parent's pages ({share}), {mib(python)} MiB of it Python's "
                "objects: writes after the fork into memory the parent filled before it",
                "build that memory after the fork, or keep it read-only in the workers")
    head = (f"{who} {'each ' if len(each) > 1 else ''}copied ~{mib(_median(each))} MiB{spread} of their "
            f"parent's Python objects ({mib(python)} MiB of the {mib(copied)} MiB copied, {share})")
    if frozen is None and all(w.collections == 0 for w in copying):
        return (f"{head}, {READS}: no full collection ran in them nor in their parent between the fork and the "
                "read of their copies (memgap's bootstrap counted them), so the collector did not walk the parent's "
                "objects there", READS_REMEDY)
    if frozen is None:
        return (f"{head}, {READS} or {COLLECTOR}: both are possible until the copies are measured with the collector "
                f"frozen at fork (`memgap lab` does)",
                f"if the collector's writes are the copies: {FREEZE_REMEDY}; if reads are (the copies stay with it "
                f"frozen): {READS_REMEDY}")
    if frozen.collector:
        return f"{head}, {COLLECTOR}", FREEZE_REMEDY
    return (f"{head}, {READS}: with the collector frozen at fork they copied {mib(frozen.frozen)} MiB, not less",
            READS_REMEDY)


def _evidence(copying: Sequence[WorkerCopies], groups: dict[str, int], frozen: FrozenCopies | None) -> list[str]:
    out = [f"PID {w.pid} (parent {w.split.parent}): copied {mib(w.split.copied)} MiB of its parent's pages, its own "
           f"{mib(w.split.own)} MiB; private memory {mib(w.private)} MiB" for w in copying]
    largest = sorted(groups.items(), key=lambda kv: -kv[1])
    out.append("copied, by layer: " + ", ".join(f"{g} {mib(n)} MiB" for g, n in largest if n >= MiB / 10))
    for w in copying:
        if len(w.series) > 1:
            out.append(f"PID {w.pid} over time: " + ", ".join(f"{mib(n)} MiB at {t:.1f} s ({what})"
                                                              for t, what, n in w.series))
    counted = [w for w in copying if w.collections is not None]
    if counted:
        out.append("full collections between the fork and the read of its copies, in each worker and its parent "
                   "(memgap's bootstrap counted them): " + ", ".join(f"PID {w.pid} {w.collections}" for w in counted))
    if frozen is not None:
        out.append(f"with the collector frozen at fork ({frozen.spec}, measured by the lab): the workers copied "
                   f"{mib(frozen.frozen)} MiB, against {mib(frozen.baseline)} MiB without (medians over the runs)")
    out.append("method: private pages (pagemap bit 56) at addresses where the parent has a page of its own; "
               "either side's write makes the copy")
    return out


def copies_remain(baseline: int, frozen: FrozenCopies | None, chosen: str | None = None) -> str:
    """The lab's words where the baseline's workers copied ``baseline`` bytes of their parent's pages (at
    their idles): why the copies remain, and what would remove them, whatever the lab recommends (``chosen``,
    None where it keeps the defaults): a setting that saves something else leaves the reads' copies."""
    head = f"the forked workers copied {mib(baseline)} MiB of their parent's pages (summed at idle, the median run)"
    if frozen is None:
        return (f"{head}, and no variant that freezes the collector at fork ran: they are the parent's objects "
                f"written by the workers' reads or by their collections; if by collections: {FREEZE_REMEDY}; "
                f"if by reads: {READS_REMEDY}")
    if frozen.collector:
        if chosen == frozen.spec:  # the recommendation removes them: nothing remains to say
            return ""
        return (f"{head}, {mib(frozen.frozen)} MiB with the collector frozen at fork ({frozen.spec}): its writes "
                "were most of them, but that variant did not qualify (its row says why)")
    return (f"{head}, and {mib(frozen.frozen)} MiB with the collector frozen at fork ({frozen.spec}): no setting "
            "removes them, as they are the workers' reads of the parent's Python objects (reference counts are "
            f"written on every read); {READS_REMEDY}")


def _median(values: list[int]) -> float:
    """The median, by hand: `statistics` brings decimal and fractions (0.7 MiB), and this module is loaded
    by an in-process snapshot, inside the program it measures, before it reads the program's RSS."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
