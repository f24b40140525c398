"""Findings: what the layers say, with the figures that say it.

A rule fires only when a ratio AND a byte floor are both crossed (``floors``: the thresholds
and the memory a ratio is taken over, shared with ``allocators``).

The allocators' findings are their readers' (memgap.allocators: ``allocator_findings`` asks
each, handing it the thresholds): glibc's from its heaps walked, jemalloc's and tcmalloc's from
the figures ``inspect --deep`` got through gdb (the allocator_free layer's detail, where
gdb_layers put them), pymalloc's from its own statistics or its pool headers read from outside.
mimalloc has none: its release builds count no allocated bytes, so what it holds free cannot be
told from what the program uses (``inspect --trim`` measures what mi_collect returns).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

from memgap.diagnose.copies import WorkerCopies, copies_finding
from memgap.diagnose.floors import FLOOR, RETAINED_FLOOR, SHARE, SHARED_MOST, Base, _resident, own_memory, ratio_base
from memgap.diagnose.gpu import gpu_findings
from memgap.documents.snapshot import Finding, Layer, Snapshot, by_pss
from memgap.report.units import MiB, mib, pct


def _base_line(snap: Snapshot, base: Base) -> str:
    """Evidence: which base a rule's ratio took, where it is not RSS."""
    return (f"ratio over its private memory ({mib(base.bytes)} MiB, outside shared memory): shared pages are "
            f"{mib(snap.rss - base.bytes)} MiB of its RSS ({pct(snap.rss - base.bytes, snap.rss)}; shared memory "
            f"{mib(_resident(snap, 'shared_memory'))} MiB)")


def _threads(snap: Snapshot) -> list[Finding]:
    stacks = _resident(snap, "stacks")
    threads = snap.status.get("Threads", 0)
    free_layer = snap.layers.get("allocator_free")
    n_arenas = free_layer.detail.get("arena_count", 0) if free_layer else 0
    out = []
    base = ratio_base(snap)
    part = base.part(snap.layers.get("stacks"), stacks)
    if stacks >= FLOOR and base.crossed(part, 0.1):
        out.append(Finding("thread-stacks", "info", f"{threads} threads hold {mib(stacks)} MiB of stack",
                           [f"stacks layer {mib(stacks)} MiB ({base.words(part, stacks)})",
                            *([_base_line(snap, base)] if base.private else [])]))
    if n_arenas > 8 and _resident(snap, "allocator_free") >= FLOOR:
        out.append(Finding("many-arenas", "info",
                           f"{n_arenas} glibc arenas for {threads} threads: each thread that mallocs may get "
                           "its own, up to 8 per CPU of the host",
                           [f"Threads: {threads}; arenas: {n_arenas}"], "MALLOC_ARENA_MAX=2 caps them"))
    return out


def _unexplained(snap: Snapshot) -> list[Finding]:
    if abs(snap.unexplained) > max(0.05 * snap.rss, 4 * MiB):
        return [Finding("unexplained", "warning",
                        f"{mib(snap.unexplained)} MiB of RSS is unexplained ({pct(snap.unexplained, snap.rss)})",
                        ["VmRSS read after the pagemap walk; memory changed during the snapshot, or mappings "
                         "memgap does not read (special or PROT_NONE) hold pages"])]
    return []


def _other_allocators(snap: Snapshot) -> list[Finding]:
    """The allocators found beside the one serving malloc: present (their code is in an object the process
    maps), and said to hold memory only where memgap read some of it (their own counters, through gdb)."""
    from memgap.sources.allocator import allocator_label

    beside = snap.allocator.beside
    others = [allocator_label(f) for f in beside] or snap.allocator.others
    if not others:
        return []
    read = [allocator_label(f) for f in beside if f.name in snap.allocator.gdb]
    unread = [f for f in beside if f.name not in snap.allocator.gdb]
    evidence = [f"{allocator_label(f)}: present, its code found in {f.library} ({f.how or 'its symbols'})"
                for f in unread] or ([] if beside else [f"present: {', '.join(others)}"])
    if unread or not beside:
        evidence.append("memgap read neither its mappings nor its own counters: whether it holds any memory is not "
                        "known (its code in an object says nothing of its pages); what it would hold is not told "
                        "apart from other anonymous memory")
    if read:
        evidence.append(f"{', '.join(read)}: its own counters read through gdb (--deep): its memory is in the "
                        "allocator layers")
    evidence.append("memory it holds is out of reach of LD_PRELOAD and of malloc_trim")
    return [Finding("second-allocator", "info",
                    f"another allocator beside {snap.allocator.name}, which serves malloc: {', '.join(others)} "
                    f"({'present; its memory read' if read and not unread else 'present; no memory of it measured'})",
                    evidence)]


def allocator_findings(snap: Snapshot, serving_malloc: bool = False) -> list[Finding]:
    """The findings on the allocators' free memory, each reader's in the registry's order: glibc's from its
    heaps walked, jemalloc's and tcmalloc's from their own figures where ``inspect --deep`` read them, then
    pymalloc's from its statistics or its pool headers; ``serving_malloc``: the C allocators' only."""
    from memgap.allocators.base import Rules
    from memgap.allocators.registry import all_readers, c_readers

    base = ratio_base(snap)
    rules = Rules(FLOOR, RETAINED_FLOOR, SHARE, base, _base_line(snap, base) if base.private else "")
    readers = list(c_readers()) if serving_malloc else list(all_readers().values())
    return [f for reader in readers for f in reader.findings(snap, rules)]


SHMEM_KINDS = {"anonymous": "anonymous MAP_SHARED (/dev/zero (deleted))", "sysv": "SysV segments (/SYSV*)",
               "posix": "POSIX shared memory (/dev/shm)", "memfd": "memfds (/memfd:)"}


def _shmem_kinds(layer: Layer) -> str:
    kinds = [(k, layer.detail.get(k) or 0) for k in SHMEM_KINDS]
    return ", ".join(f"{SHMEM_KINDS[k]} {mib(n)} MiB" for k, n in sorted(kinds, key=lambda kn: -kn[1]) if n)


def _shared_memory(snap: Snapshot) -> list[Finding]:
    """Shared memory most of its RSS: said, since a sum of RSS counts it once per process."""
    layer = snap.layers.get("shared_memory")
    shm = _resident(snap, "shared_memory")
    if layer is None or shm < FLOOR or shm < SHARED_MOST * snap.rss:
        return []
    here = f" (PSS {mib(layer.pss)} MiB here)" if layer.pss is not None else ""
    base = ratio_base(snap)
    return [Finding(
        "shared-memory", "info",
        f"shared buffers: {mib(shm)} MiB of shared memory, {pct(shm, snap.rss)} of its RSS{here}: count it once "
        "across the processes that map it (PSS), not once per RSS",
        [f"shared memory by kind: {_shmem_kinds(layer)}",
         f"its own memory beside it: {mib(own_memory(snap))} MiB (private pages outside shared memory); the "
         f"findings here take their ratios over {'it' if base.private else 'RSS'}"])]


def _runtime_retention(snap: Snapshot) -> list[Finding]:
    """A runtime's heap (Go's, a JVM's, V8's) holding much more resident than its objects use."""
    layer = snap.layers.get("runtime_heap")
    out = []
    base = ratio_base(snap)
    for rt in (layer.detail.get("runtimes") or []) if layer else []:
        retained = rt.get("retained")
        if retained is None or retained < FLOOR or not base.crossed(retained, SHARE):
            continue
        from memgap.runtimes import remedy  # here: a process without a runtime never loads the readers

        settings = ", ".join(f"{k}={v}" for k, v in (rt.get("settings") or {}).items())
        evidence = [f"{rt['runtime']} {rt.get('version', '')}: heap resident {mib(rt['resident'])} MiB, in use "
                    f"{mib(rt['in_use'])} MiB by its own count, free but resident {mib(retained)} MiB "
                    f"({base.words(retained)})",
                    f"read: {rt['route']}"]
        if rt.get("released") is not None:
            evidence.append(f"already released to the system (not RSS): {mib(rt['released'])} MiB")
        if settings:
            evidence.append(f"settings: {settings}")
        out.append(Finding(
            "runtime-heap-retained", "warning",
            f"the {rt['runtime']} heap holds {mib(retained)} MiB free but resident beside {mib(rt['in_use'])} MiB "
            "in use", evidence, remedy(rt["runtime"], rt)))
    return out


def diagnose(snap: Snapshot) -> list[Finding]:
    """Findings for one snapshot."""
    # the allocators' first (the C allocator's, then pymalloc's): the order findings have always been listed in
    return [*allocator_findings(snap), *_runtime_retention(snap), *_threads(snap),
            *_unexplained(snap), *_other_allocators(snap), *_shared_memory(snap), *gpu_findings(snap)]


def diagnose_series(snaps: Sequence[Snapshot]) -> list[Finding]:
    """Findings over a process's phases: a leak grows Python objects, retention does not."""
    if len(snaps) < 3:
        return []
    if all(s.not_python for s in snaps):
        return _native_series(snaps)
    py = [_resident(s, "python_objects") for s in snaps]
    rss = [s.rss for s in snaps]
    steps = [b - a for a, b in itertools.pairwise(py)]
    names = [s.phase or f"#{i}" for i, s in enumerate(snaps)]
    growth_py, growth_rss = py[-1] - py[0], rss[-1] - rss[0]
    evidence = [f"{n}: RSS {mib(r)} MiB, Python objects {mib(p)} MiB" for n, r, p in zip(names, rss, py, strict=True)]
    per = growth_py / max(1, len(steps))
    # A phase grew when it added a real share of the average step: memgap's own phase records
    # add a few KiB of Python objects at every phase, and counted as growth they made a load
    # done once, then flat phases, read as a leak.
    growing = [s for s in steps if s > per / 4]
    if growth_py >= FLOOR and len(growing) >= len(steps) - 1:
        per = sum(growing) / len(growing)  # per phase that grew: an exit right after the last is no phase of work
        return [Finding("python-growth", "warning",
                        f"Python objects grew by {mib(per)} MiB per phase ({mib(growth_py)} MiB in all): "
                        "a leak, not retention", evidence,
                        "find the growing objects with tracemalloc snapshots compared between phases")]
    if growth_rss < FLOOR or growth_py >= growth_rss * 0.25:
        return []
    # Not Python's small objects: free memory the allocators keep, or memory in use that the
    # program holds (large Python objects go to malloc; a C extension's too)
    in_use = _resident(snaps[-1], "allocator_in_use") - _resident(snaps[0], "allocator_in_use")
    if in_use >= growth_rss / 2:
        return [Finding("in-use-growth", "warning",
                        f"RSS grew by {mib(growth_rss)} MiB, {mib(in_use)} MiB of it memory the C allocator has "
                        "handed out and not had back: the program holds it (Python objects over 512 bytes, "
                        "such as bytes and arrays, come from malloc, not pymalloc; or a C extension's)",
                        [*evidence, f"C allocator in use: {mib(_resident(snaps[0], 'allocator_in_use'))} -> "
                                    f"{mib(_resident(snaps[-1], 'allocator_in_use'))} MiB"],
                        "run it under `memgap run --walk` to count Python's large objects, or compare tracemalloc "
                        "snapshots between phases")]
    return [Finding("retention-not-leak", "info",
                    f"RSS grew by {mib(growth_rss)} MiB while Python objects changed by {mib(growth_py)} MiB: "
                    "the allocator retains memory, the program does not hold it", evidence)]


def _native_series(snaps: Sequence[Snapshot]) -> list[Finding]:
    """The same over the phases of a program with no Python in it: memory the program holds grows
    the C allocator's bytes in use; memory the allocator keeps does not."""
    growth_rss = snaps[-1].rss - snaps[0].rss
    if growth_rss < FLOOR:
        return []
    in_use = [_resident(s, "allocator_in_use") for s in snaps]
    evidence = [f"{s.phase or f'#{i}'}: RSS {mib(s.rss)} MiB, C allocator in use {mib(u)} MiB"
                for i, (s, u) in enumerate(zip(snaps, in_use, strict=True))]
    grown = in_use[-1] - in_use[0]
    if grown >= growth_rss / 2:
        return [Finding("in-use-growth", "warning",
                        f"RSS grew by {mib(growth_rss)} MiB, {mib(grown)} MiB of it memory the C allocator has "
                        "handed out and not had back: the program holds it", evidence,
                        "a heap profiler (heaptrack, valgrind --tool=massif) shows which allocations hold it")]
    return [Finding("retention-not-leak", "info",
                    f"RSS grew by {mib(growth_rss)} MiB while the C allocator's bytes in use changed by "
                    f"{mib(grown)} MiB: the allocator retains memory, the program does not hold it", evidence)]


def diagnose_tree(snaps: Sequence[Snapshot]) -> list[Finding]:
    """Findings over a process tree: forked workers that copied their parent's pages; shared memory
    most of the RSS sum, counted once by PSS. Each process's own findings are its snapshot's."""
    return [*_copied_from_parent(snaps), *_shared_memory_tree(snaps)]


def _shared_memory_tree(snaps: Sequence[Snapshot]) -> list[Finding]:
    mapping = [s for s in snaps if _resident(s, "shared_memory")]
    rss_sum = sum(_resident(s, "shared_memory") for s in mapping)
    if not by_pss(list(snaps)) or rss_sum < FLOOR or rss_sum < SHARED_MOST * sum(s.rss for s in snaps):
        return []
    pss = sum(s.layers["shared_memory"].pss or 0 for s in mapping)
    return [Finding(
        "shared-memory", "info",
        f"shared buffers: {mib(pss)} MiB of shared memory, counted once across the tree (PSS) in "
        f"{len(mapping)} processes; their RSS sum counts it {mib(rss_sum)} MiB",
        [f"PID {s.pid}: shared memory {mib(_resident(s, 'shared_memory'))} MiB resident, PSS "
         f"{mib(s.layers['shared_memory'].pss)} MiB here; its own memory {mib(own_memory(s))} MiB" for s in mapping])]


def _copied_from_parent(snaps: Sequence[Snapshot]) -> list[Finding]:
    """A tree read at one moment (``inspect --tree``): what its forked processes copied, in the words of
    the cause (memgap.diagnose.copies: without the lab's measurement, both causes said)."""
    workers = [WorkerCopies(s.pid, cow, s.uss or 0) for s in snaps if (cow := s.copied_from_parent)]
    finding = copies_finding(workers)
    return [finding] if finding else []
