"""Take a snapshot: read every source, label the memory map, attribute.

Two routes share this code: in this process (allocator and Python statistics
through ctypes) and from outside (/proc only: maps, pagemap, and the
allocator's structures read through /proc/PID/mem, never stopping the target).
"""
from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from memgap.allocators import registry
from memgap.allocators.base import OwnFigures
from memgap.allocators.detect import detect_in_process, detect_pid
from memgap.allocators.measured import Measurements
from memgap.allocators.registry import reader_for
from memgap.documents.allocator import AllocatorInfo
from memgap.documents.gpu import GpuMemory
from memgap.documents.snapshot import NOT_PYTHON, Layer, Region, Snapshot
from memgap.errors import MemgapError, NoSuchProcess
from memgap.explain.attribution import PSS_DERIVATION, attribute
from memgap.sources import allocator as allocator_source
from memgap.sources.anon_objects import find_anon_objects
from memgap.sources.cgroup import read_memory_cgroup
from memgap.sources.glibc import Mallinfo2, MallocInfo
from memgap.sources.glibc_heaps import GlibcLayout
from memgap.sources.gpu_maps import GPU_DRIVER, is_driver_device, shared_owner, uses_cuda
from memgap.sources.jemalloc import JemallocStats
from memgap.sources.memory_map import MappedPages, MemoryMap, read_memory_map
from memgap.sources.processes import ProcessIdentity
from memgap.sources.procfs import (
    Mapping,
    MappingPss,
    ProcReader,
    is_python as maps_python,
    shared_memory_kind,
    status_int,
)
from memgap.sources.pymalloc_pools import TreeHeaders, census
from memgap.sources.resident_map import ResidentMap
from memgap.sources.static_data import STATIC_DATA, STATIC_LIKELY, StaticRange, read_static_ranges

if TYPE_CHECKING:  # the agent's client is imported only where a process has the agent; the runtimes' readers
    from memgap.agent.reply import AgentReport  # only in an outside snapshot
    from memgap.runtimes.base import RuntimeHeap

STATUS_FIELDS = ("VmPeak", "VmSize", "VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem", "VmSwap", "Threads",
                 "Pss", "Uss")
DEFAULT_ARENA_SIZE, DEFAULT_POOL_SIZE = 1 << 20, 16 << 10  # CPython >= 3.10 on 64-bit
AllocatorMappings = tuple[str, list[tuple[int, int]]]  # owner name, sorted (start, end) ranges


@dataclass
class SnapshotOptions:
    walk_python: bool = False          # gc walk for large buffers (O(objects))
    class_names: tuple[str, ...] = ()  # classes to count instances of
    regions: bool = True               # keep the labelled memory map in the snapshot
    agent: bool = True                 # outside: ask the process's native agent, when it has one
    recorded: bool = False             # read by memgap run's recorder: no note sends the user to memgap run
    agent_beside_glibc: bool = True    # ask the agent also where glibc's heaps are walked from outside


def _subtract(start: int, end: int, holes: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start, end) minus the holes, as sorted ranges."""
    out, pos = [], start
    for h_start, h_end in sorted(holes):
        if h_end <= pos or h_start >= end:
            continue
        if h_start > pos:
            out.append((pos, h_start))
        pos = max(pos, h_end)
    if pos < end:
        out.append((pos, end))
    return out


def allocator_mappings(reader: ProcReader, maps: list[Mapping], allocator: str) -> AllocatorMappings | None:
    """The mappings a non-glibc allocator made, as (owner name, sorted ranges), or None
    where memgap cannot tell them (the allocator's pages then stay unclaimed anonymous)."""
    own = reader_for(allocator)
    ranges = own.mappings(reader, maps)
    return (own.owner, ranges) if ranges is not None else None


def _in_ranges(ranges: list[tuple[int, int]], address: int) -> bool:
    i = bisect.bisect_right(ranges, (address, float("inf"))) - 1
    return i >= 0 and ranges[i][0] <= address < ranges[i][1]


def label_regions(reader: ProcReader, memmap: MemoryMap, glibc: GlibcLayout | None,
                  arena_size: int | None, pool_size: int | None,
                  allocator: AllocatorMappings | None = None,
                  runtimes: list[tuple[int, int, str, str]] | None = None,
                  static: list[StaticRange] | None = None) -> list[Region]:
    """Every resident page of the process, owned by exactly one labelled region.

    ``allocator``: mappings another allocator made (see allocator_mappings); what
    no heap or stack claims in them is that allocator's, with no object search.
    ``static``: the loaded objects' static data (memgap.sources.static_data): a range read from an
    object's program headers is its own; one only likely (from the maps) takes what is left unclaimed
    after the object search (a pymalloc arena or an mmapped chunk found there stays what it is).
    """
    res = memmap.resident
    owned_by_runtimes = runtimes or []
    owners = _owners(memmap, glibc, owned_by_runtimes, [r for r in static or [] if r.from_elf])
    likely = {r.start: r.path for r in static or [] if not r.from_elf}
    labeller = _AnonLabeller(reader, res, owners, allocator or ("", []), (arena_size, pool_size), likely)
    regions: list[Region] = []
    cuda = uses_cuda(memmap.plain_mappings)
    for mp in memmap.mappings:
        m = mp.mapping
        if m.is_file:
            share, driver = res.share_at(m.start), is_driver_device(m.path)
            if mp.file_resident or driver:  # shared memory has an inode too: told by its path; the driver's
                owner = (GPU_DRIVER if driver else  # mappings kept with nothing resident: a GPU context is open
                         shared_owner(m.path, cuda) if shared_memory_kind(m.path) else "file")
                regions.append(Region(m.start, m.end, owner, mp.file_resident, m.perms, m.path,
                                      *_whole(res, mp.file_resident, mp.file_private, share)))
            if driver:  # present entries with no page (VM_PFNMAP: the GPU's registers, its memory's window)
                continue  # are in no RSS; a shared mapping has no private copy
            if mp.anon_resident:  # private copies of a file's pages: a runtime's where it owns them (a CDS archive)
                owner, label = _runtime_owner(owned_by_runtimes, m) or ("file-cow", m.path)
                regions.append(Region(m.start, m.end, owner, mp.anon_resident, m.perms, label,
                                      *_whole(res, mp.anon_resident, mp.anon_private, share)))
            continue
        if mp.file_resident:  # shared memory without an inode (a SysV segment whose shmid is 0, [anon_shmem])
            regions.append(Region(m.start, m.end, shared_owner(m.path, cuda), mp.file_resident, m.perms, m.path,
                                  *_whole(res, mp.file_resident, mp.file_private, res.share_at(m.start))))
        regions += labeller.regions(mp)
    return regions


@dataclass
class _AnonLabeller:
    """The regions of one anonymous mapping: the owners' ranges in it (heaps, stacks, runtimes, static
    data), then another allocator's mapping, else the objects found in the rest, else unclaimed."""

    reader: ProcReader
    res: ResidentMap
    owners: list[tuple[int, int, str, str]]    # sorted and disjoint
    allocator: AllocatorMappings
    sizes: tuple[int | None, int | None]       # pymalloc's arena and pool sizes
    likely: dict[int, str]                      # mapping start -> the object whose static data it likely is

    def __post_init__(self) -> None:
        self.starts = [o[0] for o in self.owners]

    def regions(self, mp: MappedPages) -> list[Region]:
        m, res = mp.mapping, self.res
        alloc_owner, alloc_ranges = self.allocator
        regions: list[Region] = []
        claimed: list[tuple[int, int]] = []
        # the owners are disjoint and sorted: only those starting before m.end can overlap it
        for start, end, owner, label in self.owners[max(0, bisect.bisect_right(self.starts, m.start) - 1):
                                                     bisect.bisect_left(self.starts, m.end)]:
            lo, hi = max(start, m.start), min(end, m.end)
            if lo < hi:
                regions.append(Region(lo, hi, owner, _anon_in(res, mp, lo, hi), m.perms, label,
                                      *_shares(res, [(lo, hi)])))
                claimed.append((lo, hi))
        rest = _subtract(m.start, m.end, claimed)
        if rest and _in_ranges(alloc_ranges, m.start):  # kept when nothing is resident: its size counts
            regions.append(Region(rest[0][0], rest[-1][1], alloc_owner, sum(res.resident(lo, hi) for lo, hi in rest)
                                  if claimed else mp.anon_resident, m.perms, m.path or "[anon]", *_shares(res, rest)))
            return regions
        if not mp.anon_resident:
            return regions
        objects, unclaimed = find_anon_objects(self.reader, rest, res, *self.sizes)
        found = [Region(o.start, o.end, o.kind, o.resident, m.perms, m.path, *_shares(res, [(o.start, o.end)]))
                 for o in objects]
        regions.extend(found)
        if unclaimed:
            lo, hi = rest[0][0], rest[-1][1]
            private, pss = _shares(res, rest)  # the unclaimed pages: the rest less the objects found in it
            if private is not None and pss is not None:
                private -= sum(r.private or 0 for r in found)
                pss -= sum(r.pss or 0 for r in found)
            path = self.likely.get(m.start)
            regions.append(Region(lo, hi, "anon", unclaimed, m.perms, m.path or "[anon]", private, pss)
                           if path is None else Region(lo, hi, STATIC_LIKELY, unclaimed, m.perms, path, private, pss))
        return regions


def _runtime_owner(runtimes: list[tuple[int, int, str, str]], m: Mapping) -> tuple[str, str] | None:
    """The owner and label of the runtime range holding mapping ``m``, if one does."""
    return next(((owner, label) for start, end, owner, label in runtimes if start <= m.start and m.end <= end), None)


def _owners(memmap: MemoryMap, glibc: GlibcLayout | None, runtimes: list[tuple[int, int, str, str]],
            static: list[StaticRange]) -> list[tuple[int, int, str, str]]:
    """(start, end, owner, label) of the glibc heaps, the thread stacks, the runtimes' ranges and the
    objects' static data (what of it none of the others holds), sorted."""
    # a stack pointer inside a runtime's heap is a goroutine's (its stacks are heap spans): the heap's
    stacks = [(s, e, "stack", label) for s, e, label in memmap.stacks
              if not any(s < r_end and r_start < e for r_start, r_end, _, _ in runtimes)]
    others = sorted([*((s, e, "glibc-heap", label) for s, e, label in (glibc.regions() if glibc else [])),
                     *stacks, *runtimes])
    data = [(lo, hi, STATIC_DATA, r.path) for r in static
            for lo, hi in _subtract(r.start, r.end, ((s, e) for s, e, _, _ in others))]
    return sorted([*others, *data])


def _anon_in(res: ResidentMap, mp: MappedPages, lo: int, hi: int) -> int:
    """Resident bytes of [lo, hi) inside an anonymous mapping."""
    return res.resident(lo, hi) if (lo, hi) != (mp.mapping.start, mp.mapping.end) else mp.anon_resident


def _shares(res: ResidentMap, ranges: list[tuple[int, int]]) -> tuple[int | None, int | None]:
    """Private bytes and PSS bytes of the ranges' resident pages; None, None where the
    exclusive bits were not read (in-process: mincore tells residency only)."""
    if not res.knows_private:
        return None, None
    return sum(res.private(lo, hi) for lo, hi in ranges), round(sum(res.pss(lo, hi) for lo, hi in ranges))


def _whole(res: ResidentMap, resident: int, private: int, share: float) -> tuple[int | None, int | None]:
    """Private and PSS bytes of a whole mapping's pages of one kind, from its page counts."""
    if not res.knows_private:
        return None, None
    return private, round(private + (resident - private) * share)


def _with_pss(reader: ProcReader, smaps: list[MappingPss] | None = None) -> dict[str, int | str]:
    """/proc/PID/status, plus PSS and USS: what summing a tree should use (RSS counts a page
    shared by N processes N times). From ``smaps`` where the caller read it (the sums of its
    mappings' figures are what smaps_rollup adds up: the kernel's walk of every page table is
    not made twice, 3 ms for an 85 MiB worker), else from smaps_rollup."""
    status = reader.status()
    if "VmRSS" not in status:  # its memory is gone: read as it exited, it would be a snapshot of 0 bytes
        raise NoSuchProcess(reader.numeric_pid, "it exited while memgap read it (its status shows no memory; "
                                                "or it is a kernel thread, which has none)")
    if smaps is not None:
        status["Pss"] = sum(m.pss for m in smaps)
        status["Uss"] = sum(m.private for m in smaps)
        return status
    rollup = reader.smaps_rollup()
    if rollup is not None:
        status["Pss"] = rollup.get("Pss")
        status["Uss"] = rollup.get("Private_Clean") + rollup.get("Private_Dirty")
    return status


def _pss_unexplained(layers: dict[str, Layer], status: dict[str, int | str]) -> int | None:
    """The process's PSS minus its measured layers' pss, or None where a measured layer has none."""
    measured = [layer for layer in layers.values() if layer.resident is not None]
    if "Pss" not in status or any(layer.pss is None for layer in measured):
        return None
    return status_int(status, "Pss") - sum(layer.pss or 0 for layer in measured)


def _status_subset(status: dict[str, int | str]) -> dict[str, int]:
    return {k: status_int(status, k) for k in STATUS_FIELDS if k in status}


def snapshot_self(phase: str | None = None, options: SnapshotOptions | None = None) -> Snapshot:
    """A snapshot of this process, with allocator and Python statistics.

    The cyclic garbage collector is paused while it runs: the snapshot's own
    allocations must not set off a collection in the program it observes (one
    that frees memory between the pagemap read and VmRSS would also show up
    as unexplained).
    """
    import gc

    import memgap.diagnose.findings  # noqa: F401
    from memgap.sources.glibc_chunks import native_walker

    # What the snapshot loads on first use, loaded before it reads anything: the findings' modules (loaded
    # last) and glibc's chunk walker (loaded by the heaps' walk) came after pymalloc's figures were read,
    # into the program's next phase snapshot (its Python objects +0.49 MiB between two phases that did nothing)
    native_walker()

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _snapshot_self(phase, options)
    finally:
        if was_enabled:
            gc.enable()


def _snapshot_self(phase: str | None, options: SnapshotOptions | None) -> Snapshot:
    from memgap.sources import pyheap, pymalloc as pymalloc_source

    options = options or SnapshotOptions()
    started = time.perf_counter()
    notes: dict[str, str] = {}
    # The gc walk first: it allocates (and may map new pymalloc arenas), so every
    # figure read after it, maps included, sees the heap as the walk left it.
    heap = pyheap.python_heap(options.walk_python, options.class_names)
    with ProcReader("self") as reader:
        started_at = reader.stat().start_time
        cmd = reader.cmdline()  # as an outside snapshot has it (the web route and notebooks showed none)
        maps = reader.maps()
        detection = detect_in_process(maps)
        own = reader_for(detection.name)
        figures = own.in_process(notes)  # glibc's mallinfo2 and malloc_info, or jemalloc's stats
        mallinfo, malloc_info, jemalloc = figures.mallinfo, figures.malloc_info, figures.jemalloc
        if detection.beside:
            notes["other_anon"] = allocator_source.beside_note(detection)
        pm = pymalloc_source.parse_debugmallocstats(pymalloc_source.capture_debugmallocstats())
        # before the pagemap: parsing smaps allocates, and jemalloc may purge pages when it does
        owned = allocator_mappings(reader, maps, own.name) if own.counts(figures) else None
        # the objects' static data: their files read before the pagemap, which VmRSS is read beside
        static = read_static_ranges(maps, allocator_source.process_root(reader.base))
        # Python threads: their pthread struct (the ident) sits at the top of their stack
        py_threads = [t for t in threading.enumerate() if t is not threading.main_thread() and t.ident]
        memmap = read_memory_map(reader, tuple(t.ident for t in py_threads if t.ident), maps,
                                 frozenset(t.native_id for t in py_threads if t.native_id))
        # VmRSS beside the residency it is compared with: the walks below allocate, and an
        # allocation may let jemalloc purge decayed pages (5 MiB once, on a loaded machine)
        status = _with_pss(reader)
        layout = None
        if mallinfo is not None and malloc_info is not None:
            layout = own.heaps(reader, memmap, detection)
        regions = label_regions(reader, memmap, layout, pm.arena_size if pm else None,
                                pm.pool_size if pm else None, owned, static=static)
    rss = status_int(status, "VmRSS")
    measured = Measurements(rss, regions, detection.name, layout, mallinfo=mallinfo, malloc_info=malloc_info,
                            jemalloc=jemalloc, pymalloc=pm, python_heap=heap, notes=notes)
    layers, unexplained = attribute(measured)
    snap = Snapshot(
        pid=os.getpid(), time=time.time(), rss=rss, layers=layers, unexplained=unexplained,
        allocator=_allocator_info(detection, mallinfo, malloc_info, jemalloc),
        phase=phase, route="in-process", status=_status_subset(status),
        pymalloc=pm, python_heap=heap,
        regions=regions if options.regions else [],
        pss_note="not split by layer in-process: the anonymous pages' residency comes from mincore(2), which "
                 "does not tell pages shared with another process (an outside snapshot reads pagemap's bit 56)",
        start_time=started_at, cmd=cmd,
    )
    return _finish(snap, started)


def _allocator_info(detection: allocator_source.AllocatorDetection, mallinfo: Mallinfo2 | None,
                    malloc_info: MallocInfo | None, jemalloc: JemallocStats | None) -> AllocatorInfo:
    out = detection.info()
    if mallinfo is not None:
        out.mallinfo2 = mallinfo.__dict__.copy()
    if malloc_info is not None:
        out.arenas = len(malloc_info.arenas)
        out.mmap_count, out.mmap_bytes = malloc_info.mmap_count, malloc_info.mmap_bytes
    if jemalloc is not None:
        out.jemalloc = jemalloc.__dict__.copy()
    return out


def _ask_agent(reader: ProcReader, pid: int, proc_root: str) -> tuple[AgentReport | None, str]:
    """The report of the native agent preloaded in ``pid`` (None if it has none, or memgap would
    not take it: the process's own, every figure checked), and why not."""
    from memgap.agent.client import ask

    try:
        return ask(pid, proc_root, reader), ""
    except MemgapError as exc:
        return None, str(exc)


def _no_arena_note(recorded: bool) -> str:
    """Why a Python process's objects are not measured from outside; under memgap run (``recorded``)
    it does not send the user to memgap run."""
    return ("no pymalloc arena found from outside (PYTHONMALLOC=malloc, or a free-threaded build): needs the "
            "process's own statistics" + (", which its phase snapshots in this run have" if recorded
                                          else ", run it under `memgap run`"))


def snapshot_pid(pid: int, options: SnapshotOptions | None = None, proc_root: str = "/proc",
                 tree: TreeHeaders | None = None) -> Snapshot:
    """A snapshot of another process, read from /proc without stopping or changing it.

    When the process has memgap's native agent preloaded, the agent's allocator
    statistics (mallinfo2, malloc_info, jemalloc's) join what /proc shows. ``tree``: the pool
    headers the processes of a tree read at the same moment share (``memgap.explain.tree``).
    """
    options = options or SnapshotOptions()
    started = time.perf_counter()
    notes = {"python_objects": _no_arena_note(options.recorded)}
    with ProcReader(pid, proc_root) as reader:
        stat_before = reader.stat()
        maps = reader.maps()
        detection = detect_pid(reader, maps)
        own = reader_for(detection.name)
        asked = options.agent and (options.agent_beside_glibc or not own.walks_heaps(detection))
        report, agent_problem = _ask_agent(reader, pid, proc_root) if asked else (None, "")
        if report is not None:  # its answer may map memory (jemalloc's stats.mapped grew by 180 KiB): maps again
            maps = reader.maps()
        # the agent's statistics stand in for a walk; the pages come from the allocator's mappings,
        # read before the pagemap so that pagemap and VmRSS are read close together
        counting = registry.counting(_agent_figures(report)) if report is not None else None
        agent_stats = counting is not None
        owned = None if counting is None else allocator_mappings(reader, maps, counting.name)
        # the objects' static data: their files read before the pagemap, which VmRSS is read beside
        static = read_static_ranges(maps, allocator_source.process_root(reader.base))
        memmap = read_memory_map(reader)
        smaps = reader.smaps_pss()
        memmap.resident.set_shares(smaps)  # beside the pagemap: each mapping's PSS
        is_python = maps_python(maps)
        if not is_python:
            notes["python_objects"] = NOT_PYTHON
        layout = _heaps_outside(reader, memmap, detection, agent_stats, notes)
        sizes: tuple[int | None, int | None] = (DEFAULT_ARENA_SIZE, DEFAULT_POOL_SIZE) if is_python else (None, None)
        runtimes, ranges = _read_runtimes(reader, maps, notes)
        regions = label_regions(reader, memmap, layout, *sizes, owned, ranges, static)
        status = _with_pss(reader, smaps)
        # after VmRSS, which belongs beside the pagemap; headers only on the pages that pagemap saw resident
        pools = census(reader, memmap.resident, [(r.start, r.end) for r in regions if r.owner == "pymalloc-arena"],
                       DEFAULT_POOL_SIZE, tree) if is_python else None
        cmd = reader.cmdline()
        ProcessIdentity(pid, stat_before.start_time).check(now=reader.stat().start_time)
    rss = status_int(status, "VmRSS")
    measured = Measurements(rss, regions, detection.name, layout, notes=notes, pools=pools, runtimes=runtimes)
    _take_agent_figures(measured, report)
    layers, unexplained = attribute(measured)
    allocator = _allocator_info(detection, measured.mallinfo, measured.malloc_info, measured.jemalloc)
    if report is not None:
        allocator.agent = report.summary()
    elif agent_problem:
        allocator.agent_problem = agent_problem
    snap = Snapshot(
        pid=pid, time=time.time(), rss=rss, layers=layers, unexplained=unexplained,
        allocator=allocator, route="outside, with the agent" if report is not None else "outside",
        status=_status_subset(status), regions=regions if options.regions else [], cmd=cmd,
        pss_unexplained=_pss_unexplained(layers, status), pss_note=PSS_DERIVATION, start_time=stat_before.start_time,
    )
    return _finish(snap, started, proc_root)


def _heaps_outside(reader: ProcReader, memmap: MemoryMap, detection: allocator_source.AllocatorDetection,
                   agent_stats: bool, notes: dict[str, str]) -> GlibcLayout | None:
    """The allocator's heaps walked from outside where its reader can (glibc's: read-only, validated
    walks through /proc/PID/mem), else the allocator layers' notes say why they are not measured."""
    if detection.beside:
        notes["other_anon"] = allocator_source.beside_note(detection)
    own = reader_for(detection.name)
    if own.walks_heaps(detection):
        return own.heaps(reader, memmap, detection)
    if not agent_stats:
        notes["allocator_in_use"] = notes["allocator_free"] = own.outside_note(detection)
    return None


def _read_runtimes(reader: ProcReader, maps: list[Mapping], notes: dict[str, str]
                   ) -> tuple[list[RuntimeHeap], list[tuple[int, int, str, str]]]:
    """The heaps of the runtimes found in the process (Go, a JVM, V8), each read by its own reader
    (memgap.runtimes), and the ranges they own; one that cannot be read is a note under other_anon,
    and the snapshot goes on."""
    from memgap.runtimes import READERS, detect_runtimes
    from memgap.runtimes.base import ProcessView
    from memgap.runtimes.layers import owner_ranges

    try:
        exe: str | None = os.readlink(f"{reader.base}/exe")
    except OSError:
        exe = None
    view = ProcessView(reader.numeric_pid, reader, maps, exe)
    heaps = []
    for info in detect_runtimes(view):
        try:
            heaps.append(READERS[info.name].read(view, info))
        except (MemgapError, OSError, ValueError) as exc:
            notes["other_anon"] = f"{info.name} {info.version}: its heap could not be read ({exc})"
    return heaps, owner_ranges(heaps)


def _agent_figures(report: AgentReport) -> OwnFigures:
    """The native agent's allocator statistics."""
    return OwnFigures(report.mallinfo, report.malloc_info, report.jemalloc, report.tcmalloc or None)


def _take_agent_figures(measured: Measurements, report: AgentReport | None) -> None:
    """The native agent's allocator statistics, where it answered, in place of a walk."""
    if report is not None:
        figures = _agent_figures(report)
        measured.mallinfo, measured.malloc_info, measured.jemalloc = figures.mallinfo, figures.malloc_info, \
            figures.jemalloc
        measured.tcmalloc = figures.tcmalloc


def read_gpu(pid: int, in_process: bool = False) -> GpuMemory | None:
    """The process's device memory per GPU as the driver counts it (NVML), beside its RSS; in this process,
    PyTorch's caching allocator too where the program runs it, and NVML only where the program loaded it
    (PyTorch does, with CUDA). None where the driver does not list it."""
    from memgap.sources.nvml import gpu_memory
    from memgap.sources.torch_cuda import torch_cache

    gpu = gpu_memory([pid], only_loaded=in_process).get(pid)
    torch = torch_cache(gpu) if in_process else None
    if torch is not None:
        gpu = replace(gpu or GpuMemory(), torch=torch)
    return gpu


def _finish(snap: Snapshot, started: float, proc_root: str = "/proc") -> Snapshot:
    """Add the memory cgroup's view, stamp the collection time and add the findings."""
    from memgap.diagnose.findings import diagnose

    cgroup = read_memory_cgroup(snap.pid if snap.route != "in-process" else "self", proc_root)
    snap.cgroup = cgroup
    if "gpu_driver" in snap.layers:  # a GPU context: only then is the driver asked (a process without loads nothing)
        snap.gpu = read_gpu(snap.pid, snap.route == "in-process")
    snap.collect_seconds = time.perf_counter() - started
    snap.findings = diagnose(snap)
    return snap
