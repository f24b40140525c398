"""The JVM (HotSpot): its Java heap, code cache and class metadata, read from outside.

Found by ``libjvm.so`` in the process's maps; its version from the ``release`` file of the JDK
home above it (``lib/server/libjvm.so`` -> home), else from the perf data's
``java.property.java.vm.version``. Native libraries the JVM loads may bring another allocator
(jemalloc...): those are the allocators' readers' business; this reader claims only the JVM's own.

``read`` (outside, never stops the process): the JVM's perf data, the counters jstat reads,
from the ``hsperfdata_<user>/<pid>`` file the process maps (found in its maps, so a stale file of
an earlier process is never taken; opened through /proc/PID/root one component at a time, no
symlink followed, its owner the target's user and its inode the mapped one), else from the mapping
itself through /proc/PID/mem (a file deleted by a /tmp cleaner). Its figures:

- ``in_use``: every heap space's ``sun.gc.generation.N.space.M.used`` (live objects and garbage
  not yet collected): what MemoryMXBean's heap used says, read from the same counters.
- ``committed``: every generation's ``capacity`` (G1 pads each by 8 bytes so it never reads 0:
  rounded down to a page); ``limit``: the generations' ``maxCapacity`` (-Xmx; one of them where
  the generations share one heap: G1, generational ZGC). Serial and Parallel commit both survivor
  spaces, which MemoryMXBean leaves out of its committed figure (one of them): here they count.
- ``retained``: committed - used, but only what is resident: the heap's resident pages (pagemap
  over its reservation) less ``in_use``. Committed pages the JVM never touched are not RSS.
- ``ranges``: the Java heap's reservation (the run of private anonymous pieces, ``rw-p`` where
  committed and ``---p`` where reserved, of exactly the limit's size whose writable bytes are
  closest to the committed figure; JDK 17's archived heap regions from classes.jsa included), the
  code cache (``rwxp``/``---p``, ReservedCodeCacheSize: 240 MiB by default with tiered compilation,
  48 MiB without), the compressed class space (``sun.gc.compressedclassspace.maxCapacity``, 1 GiB by
  default) and the first 64 MiB node of non-class metaspace (the reservation just below the CDS
  archive). All found by shape (memgap.runtimes.jvm_maps): the perf data has no addresses. ZGC's
  heap (JDK 17) is a memfd (``/memfd:java_heap``) mapped once per view: each view is a range, its
  pages shared memory, counted in each view that touched them; its retained bytes are not measured.
- ``metadata``: resident bytes of the code cache, the class space and that metaspace node (pagemap).
  Metaspace's own counters (``sun.gc.metaspace.*``) are updated only at a collection: said in notes.
- ``settings``: the collector (``sun.gc.policy.name``, ``sun.gc.collector.N.name``), the flags of
  ``java.rt.vmArgs`` (-Xmx as MaxHeapSize...), the main class (``sun.rt.javaCommand``).

Not read from outside: the GC's own structures (G1's remembered sets, mark bitmaps, card table),
compiler arenas, the JVM's malloc: they stay in the allocator's layers or other_anon.

``read_deep`` (the caller asks for it): the above, then the JVM's own supported way, its attach
API through ``jcmd PID GC.heap_info`` (the heap's exact reserved range, its committed and used
bytes: the figures when the perf data is off, -XX:-UsePerfData) and ``jcmd PID VM.native_memory
summary`` where Native Memory Tracking is on (the GC's structures, committed: an upper bound of
what is resident). Refused where the JVM says attaching is off (-XX:+DisableAttachMechanism) or
where the first attach's SIGQUIT would end it (-Xrs with no attach socket yet). jcmd runs as memgap's
user, which must be the JVM's; it is the target's own JDK's where it shares memgap's mount namespace.

Where neither works (perf data off and no deep read): the heap's range from -Xmx on its command line
and its resident pages, by shape only, said so; no used figure.

Checked on OpenJDK 17.0.15 (Debian) with G1 (the tests: every figure against MemoryMXBean, smaps and
NMT) and by hand with Serial, Parallel, ZGC and Shenandoah (the counters' shapes; the heap's used as
MemoryMXBean's); on Temurin 25.0.3 with G1 (the tests) and generational ZGC (by hand: its young and
old generations each as large as the heap).
"""
from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from itertools import pairwise
from typing import TYPE_CHECKING

from memgap.errors import MalformedInput, MemgapError
from memgap.runtimes import jvm_maps, register
from memgap.runtimes.base import OwnedRange, ProcessView, RuntimeHeap, RuntimeInfo
from memgap.runtimes.jvm_jcmd import attach_refusal, jcmd_path, run_jcmd
from memgap.sources.procfs import Mapping, count_pagemap

# The JVM's parsers (perf data, flags, jcmd's outputs) are loaded only where libjvm.so is mapped: every
# look asks whether a process is a JVM, and most are not (importing them cost that 15-25 ms).
if TYPE_CHECKING:
    from memgap.runtimes.jvm_parse import HeapInfo, JvmFigures
    from memgap.sources.hsperfdata import PerfData

MAX_PERFDATA = 16 << 20   # PerfDataMemorySize is 64 KiB by default; a larger file is not one
MAX_RELEASE = 64 << 10
ZGC_HEAP = "/memfd:java_heap"
CLASS_SPACE_DEFAULT = 1 << 30
SETTINGS_FLAGS = ("MaxHeapSize", "InitialHeapSize", "MinHeapSize", "MinHeapFreeRatio", "MaxHeapFreeRatio",
                  "G1PeriodicGCInterval", "SoftMaxHeapSize", "ZUncommit", "ZUncommitDelay", "ShenandoahUncommit",
                  "MaxRAMPercentage", "InitialRAMPercentage", "MinRAMPercentage", "MaxRAM", "UseContainerSupport",
                  "ReservedCodeCacheSize", "MaxMetaspaceSize", "CompressedClassSpaceSize", "NativeMemoryTracking",
                  "UseG1GC", "UseParallelGC", "UseSerialGC", "UseZGC", "UseShenandoahGC", "AlwaysPreTouch",
                  "UseTransparentHugePages", "ThreadStackSize", "UsePerfData", "DisableAttachMechanism",
                  "ReduceSignalUsage")


def _libjvm(maps: list[Mapping]) -> Mapping | None:
    for m in maps:
        if os.path.basename(m.path.removesuffix(" (deleted)")) == "libjvm.so":
            return m
    return None


class JvmReader:
    """HotSpot's reader: ``detect``, ``read`` (perf data and shapes), ``read_deep`` (and jcmd)."""

    def detect(self, process: ProcessView) -> RuntimeInfo | None:
        lib = _libjvm(process.maps)
        if lib is None:
            return None
        path = lib.path.removesuffix(" (deleted)")
        home, release = _release(process.pid, path)
        version = release.get("JAVA_RUNTIME_VERSION") or release.get("JAVA_VERSION", "")
        how = f"libjvm.so in its maps ({path})"
        if version:
            return RuntimeInfo("jvm", version, f"{how}; version from {home}/release")
        perf, _where = _perfdata(process)
        told = perf.text("java.property.java.vm.version") if perf is not None else None
        if told:
            return RuntimeInfo("jvm", told, f"{how}; version from its perf data (java.property.java.vm.version)")
        return RuntimeInfo("jvm", "", f"{how}; no release file beside it and no perf data: version not told")

    def read(self, process: ProcessView, info: RuntimeInfo) -> RuntimeHeap:
        """From outside: the perf data, the ranges by shape and their resident pages."""
        return _read(process, info)[0]

    def read_deep(self, process: ProcessView, info: RuntimeInfo) -> RuntimeHeap:
        """``read``, then the JVM's attach API through jcmd (GC.heap_info, VM.native_memory summary)."""
        from memgap.runtimes.jvm_parse import parse_heap_info, parse_native_memory

        heap, figures, flags = _read(process, info)
        refusal = attach_refusal(process, flags, figures.attach_supported if figures else None)
        lib = _libjvm(process.maps)
        jcmd = jcmd_path(process, _jdk_home(lib.path)) if lib is not None else shutil.which("jcmd")
        if refusal or jcmd is None:
            heap.notes.append(f"jcmd not run: {refusal or 'no jcmd in the target JDK nor on PATH'}")
            return heap
        heap_info = run_jcmd(jcmd, process.pid, "GC.heap_info", heap.notes)
        nmt = run_jcmd(jcmd, process.pid, "VM.native_memory summary", heap.notes)
        used = [c for c, text in (("GC.heap_info", heap_info), ("VM.native_memory summary", nmt)) if text]
        if used:
            heap.route += f"; inside through its attach API: jcmd {', '.join(used)}"
        if heap_info:
            _apply_heap_info(heap, process, parse_heap_info(heap_info))
        if nmt:
            _apply_native_memory(heap, parse_native_memory(nmt))
        return heap


def _read(process: ProcessView, info: RuntimeInfo) -> tuple[RuntimeHeap, JvmFigures | None, dict[str, str]]:
    from memgap.runtimes.jvm_parse import jvm_figures, split_vm_args, vm_flags

    perf, where = _perfdata(process)
    figures: JvmFigures | None = None
    notes: list[str] = []
    if perf is not None:
        try:
            figures = jvm_figures(perf)
        except MalformedInput as exc:
            notes.append(f"perf data read but not understood: {exc}")
    flags = vm_flags(split_vm_args(figures.vm_args)) if figures else _command_line_flags(process)
    if figures is not None:
        route = f"outside: the JVM's perf data (hsperfdata: {where}); ranges by mapping shapes"
    else:
        route = "outside: mapping shapes only, said so (no perf data; read_deep() asks the JVM through jcmd)"
        notes.append(f"perf data: {where}")
    heap = RuntimeHeap(info, route, notes=notes)
    _fill_heap(heap, process, figures, flags)
    _fill_metadata(heap, process, figures, flags)
    heap.settings.update(_settings(figures, flags))
    return heap, figures, flags


def _apply_heap_info(heap: RuntimeHeap, process: ProcessView, info: HeapInfo) -> None:
    """GC.heap_info's exact heap range (and its figures where the perf data gave none)."""
    if heap.in_use is None and info.used is not None:
        heap.in_use, heap.committed = info.used, info.committed
    if info.start is None or info.end is None:
        heap.notes.append("GC.heap_info gave no heap range (this collector prints none)")
        return
    shaped = next(((r.start, r.end) for r in heap.ranges if r.label == "java heap"), None)
    if shaped is not None and shaped != (info.start, info.end):
        heap.notes.append(f"the heap found by shape [{shaped[0]:#x}, {shaped[1]:#x}) is not GC.heap_info's: "
                          "GC.heap_info's taken")
    _set_heap_range(heap, process, (info.start, info.end))
    if info.metaspace:
        heap.notes.append(f"GC.heap_info now: metaspace {info.metaspace}, class space {info.class_space}")


def _apply_native_memory(heap: RuntimeHeap, nmt: dict[str, tuple[int, int]]) -> None:
    """Native Memory Tracking's committed bytes: the GC's structures into metadata (committed, an upper
    bound of their resident bytes), every category into a note."""
    if not nmt:
        heap.notes.append("Native Memory Tracking is off (-XX:NativeMemoryTracking=summary turns it on)")
        return
    if "GC" in nmt:
        heap.metadata["gc structures (committed, NMT)"] = nmt["GC"][1]
    told = ", ".join(f"{name} {committed}" for name, (_reserved, committed) in nmt.items())
    heap.notes.append(f"Native Memory Tracking, committed bytes: {told}")


def _fill_heap(heap: RuntimeHeap, process: ProcessView, figures: JvmFigures | None, flags: dict[str, str]) -> None:
    """The Java heap's figures and its range (by shape), its resident part measured."""
    from memgap.runtimes.jvm_parse import parse_size

    limit = figures.limit if figures and figures.limit else parse_size(flags.get("MaxHeapSize", ""))
    heap.limit = limit
    if figures is not None:
        heap.in_use, heap.committed = figures.used, figures.committed
    if limit is None:
        heap.notes.append("the heap's size is not told (no perf data, no -Xmx): its range is not found")
        return
    views = [m for m in process.maps if m.path.startswith(ZGC_HEAP)]
    if views:  # ZGC: its heap is a memfd, mapped once per view (JDK 17: three), its pages shared memory
        heap.ranges[:0] = [OwnedRange(m.start, m.end, "java heap", heap=True) for m in views]
        heap.notes.append(f"ZGC's heap is a memfd mapped in {len(views)} pieces (its views): its resident "
                          "pages are counted in each view that touched them; retained not measured")
        return
    found = jvm_maps.find_reservation(process.maps, limit, heap.committed, jvm_maps.heap_piece)
    if found is None:
        heap.notes.append(f"no reservation of {limit} bytes shaped as the Java heap in its maps")
        return
    _set_heap_range(heap, process, found)


def _set_heap_range(heap: RuntimeHeap, process: ProcessView, found: tuple[int, int]) -> None:
    heap.ranges = [r for r in heap.ranges if r.label != "java heap"]
    heap.notes = [n for n in heap.notes if not n.startswith("java heap: ")]
    heap.ranges.insert(0, OwnedRange(found[0], found[1], "java heap", heap=True))
    resident = _resident(process, *found)
    if heap.committed is None:  # shapes only: what is writable is what is committed
        heap.committed = jvm_maps.writable_bytes(sorted(process.maps, key=lambda m: m.start), *found)
    if heap.in_use is not None and heap.committed is not None:
        heap.retained = max(0, min(heap.committed - heap.in_use, resident - heap.in_use))
    heap.notes.append(f"java heap: {resident} bytes resident in its reservation [{found[0]:#x}, {found[1]:#x})")


def _archive_outside(maps: list[Mapping], taken: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The CDS archive's writable mapping outside the Java heap (classes.jsa mapped privately, its
    classes relocated in place: its written pages are the JVM's metadata, not a file's), if there is one."""
    pieces = [m for m in maps if m.is_file and m.path.endswith(".jsa") and m.writable
              and not any(lo < m.end and m.start < hi for lo, hi in taken)]
    return (pieces[0].start, pieces[-1].end) if pieces and all(
        a.end == b.start for a, b in pairwise(pieces)) else None


def _fill_metadata(heap: RuntimeHeap, process: ProcessView, figures: JvmFigures | None,
                   flags: dict[str, str]) -> None:
    """Code cache, class space and metaspace: their ranges (by shape) and resident bytes."""
    from memgap.runtimes.jvm_parse import parse_size

    code = jvm_maps.code_cache(process.maps, parse_size(flags.get("ReservedCodeCacheSize", "")))
    class_size = (figures.class_space_reserved if figures and figures.class_space_reserved
                  else parse_size(flags.get("CompressedClassSpaceSize", "")) or CLASS_SPACE_DEFAULT)
    committed = figures.class_space_committed if figures else None
    taken = [(r.start, r.end) for r in heap.ranges if r.heap]
    klass = (jvm_maps.find_reservation(process.maps, class_size, committed, jvm_maps.data_piece, taken)
             if flags.get("UseCompressedClassPointers") != "false" else None)
    meta = jvm_maps.first_metaspace_node(process.maps)
    archive = _archive_outside(process.maps, taken)
    for label, found in (("code cache", code), ("class space", klass), ("metaspace", meta),
                         ("class data archive (CDS)", archive)):
        if found is None:
            heap.notes.append(f"{label}: no range of its shape in the maps")
            continue
        heap.ranges.append(OwnedRange(found[0], found[1], label, heap=False))
        heap.metadata[label] = _resident(process, *found)
    if figures and figures.metaspace_committed is not None:
        heap.notes.append(f"metaspace committed {figures.metaspace_committed} bytes (class space "
                          f"{figures.class_space_committed}) at the last collection: HotSpot updates these "
                          "counters only then")


def _settings(figures: JvmFigures | None, flags: dict[str, str]) -> dict[str, str]:
    out = {name: flags[name] for name in SETTINGS_FLAGS if name in flags}
    if figures is not None:
        if figures.policy:
            out["gc policy"] = figures.policy
        if figures.collectors:
            out["collectors"] = ", ".join(figures.collectors)
        if figures.vm_args:
            out["vm args"] = figures.vm_args
        if figures.java_command:
            out["java command"] = figures.java_command
    return out


def _resident(process: ProcessView, start: int, end: int) -> int:
    """Resident bytes in [start, end): pagemap over the mapped, accessible pieces inside it."""
    pages = 0
    for m in process.maps:
        low, high = max(m.start, start), min(m.end, end)
        if low < high and m.perms[:3] != "---":
            pages += count_pagemap(process.reader.pagemap(low, high)).present
    return pages * os.sysconf("SC_PAGE_SIZE")


def _perfdata_mapping(process: ProcessView) -> Mapping | None:
    """The JVM's shared mapping of its perf data file: named hsperfdata_<user>/<pid>, or (renamed,
    its name lost) a small shared file mapping that starts with the perf data's magic."""
    from memgap.sources.hsperfdata import MAGIC

    shared = [m for m in process.maps if m.perms[3] == "s" and m.is_file and m.size <= MAX_PERFDATA]
    for m in shared:
        path = m.path.removesuffix(" (deleted)")
        if os.path.basename(os.path.dirname(path)).startswith("hsperfdata_") and os.path.basename(path).isdigit():
            return m
    for m in shared:
        if process.reader.read_memory(m.start, len(MAGIC)) == MAGIC:
            return m
    return None


def _perfdata(process: ProcessView) -> tuple[PerfData | None, str]:
    """The perf data and where it was read from; None and why not."""
    from memgap.sources.hsperfdata import parse_perfdata

    m = _perfdata_mapping(process)
    if m is None:
        return None, "no hsperfdata file in its maps (-XX:-UsePerfData, or -XX:+PerfDisableSharedMem)"
    path = m.path.removesuffix(" (deleted)")
    data, why = _read_beneath_root(process, path, m.inode), ""
    where = f"the file {path} it maps, through /proc/{process.pid}/root"
    if data is None:
        data = process.reader.read_memory(m.start, m.size)
        why = "its file unreadable or not the one mapped; "
        where = f"{why}its mapping of {path} at {m.start:#x}, through /proc/{process.pid}/mem"
    if data is None:
        return None, f"{why}its mapping at {m.start:#x} unreadable"
    try:
        return parse_perfdata(data), where
    except MalformedInput as exc:
        return None, f"{where}: {exc}"


def _read_beneath_root(process: ProcessView, path: str, inode: int) -> bytes | None:
    """The perf data file: a regular file owned by the process's user, the inode it maps."""
    try:
        uid = int(str(process.reader.status().get("Uid", "-1")).split()[0])
    except (MemgapError, ValueError):
        return None

    def trusted(st: os.stat_result) -> bool:
        return st.st_uid == uid and st.st_ino == inode

    return read_in_root(process.pid, path, MAX_PERFDATA, trusted)


def read_in_root(pid: int, path: str, limit: int, trusted: Callable[[os.stat_result], bool]) -> bytes | None:
    """The file at ``path`` inside the process's root (/proc/PID/root, so containers work), each
    component opened without following a symlink (a container's symlink would otherwise lead out of
    it); only a regular file of at most ``limit`` bytes that ``trusted`` accepts; None otherwise."""
    parts = [p for p in path.split("/") if p]
    if not path.startswith("/") or not parts or ".." in parts:
        return None
    fds: list[int] = []
    try:
        fds.append(os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY))
        for part in parts[:-1]:
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or not trusted(st):
            return None
        return os.pread(fds[-1], st.st_size, 0)
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _jdk_home(libjvm: str) -> str:
    """lib/server/libjvm.so -> the JDK home three levels up."""
    return os.path.dirname(os.path.dirname(os.path.dirname(libjvm.removesuffix(" (deleted)"))))


def _release(pid: int, libjvm: str) -> tuple[str, dict[str, str]]:
    """The JDK home above libjvm.so (lib/server/, or JDK 8's jre/lib/ARCH/server/) and its release file."""
    from memgap.runtimes.jvm_parse import parse_release

    home = os.path.dirname(libjvm)
    for _up in range(4):
        home = os.path.dirname(home)
        data = read_in_root(pid, f"{home}/release", MAX_RELEASE, lambda st: True)
        if data is not None:
            return home, parse_release(data.decode("utf-8", "replace"))
    return _jdk_home(libjvm), {}


def _command_line_flags(process: ProcessView) -> dict[str, str]:
    """The JVM's flags from JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS and its command line (the later wins)."""
    from memgap.runtimes.jvm_parse import split_vm_args, vm_flags

    words: list[str] = []
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        words += split_vm_args(process.environ.get(name, ""))
    try:
        words += process.reader.cmdline()[1:]
    except MemgapError:
        pass
    return vm_flags(words)


READER = JvmReader()
register("jvm", READER)
