"""Go: the runtime's own heap figures, read from outside without stopping the process.

Detection (``detect``): the program (``/proc/PID/exe``) carries ``.go.buildinfo`` (its magic and
the Go version, kept by ``-ldflags='-s -w'``) or the runtime's symbols (``runtime.mheap_``,
``runtime.memstats``, ``runtime.buildVersion``) in ``.symtab``. ``stripped`` where it lacks
``.symtab`` (``-s``) or DWARF (``-w``): named with its version, its state left unread.

The figures (``read``) are the runtime's own, read in /proc/PID/mem at the addresses of its globals,
each field's offset taken from the program's DWARF (``go_dwarf``; cached per Go build id), without
ptrace or a stop (``go_state`` says where each lives and how a torn read is told and read again):

- ``in_use`` = HeapInuse (``gcController.heapInUse``: bytes in spans in use, objects and the free slots
  between them); ``retained`` = HeapIdle - HeapReleased (``heapFree``: free spans still backed by
  memory); ``released`` = HeapReleased (scavenged: given back with MADV_DONTNEED, not resident);
  ``committed`` = in_use + retained (HeapSys - HeapReleased, the contract of ``RuntimeHeap``; HeapSys
  itself is in the notes); ``limit`` = GOMEMLIMIT as the runtime holds it (``gcController.memoryLimit``),
  None where unset.
- ``metadata``: ``stacks`` (StackInuse: goroutine stacks, carved from heap spans), ``os stacks``
  (StackSys - StackInuse), ``gc metadata`` (GCSys), ``mspan/mcache`` (MSpanInuse + MCacheInuse),
  ``other`` (OtherSys + BuckHashSys): the runtime's byte counts, as runtime/metrics'
  ``/memory/classes/*`` (not residency: the runtime counts what it handed out).
- ``ranges``: the heap arenas (``mheap_.heapArenas``: 64 MiB each), split by the page allocator's
  bitmaps (``mheap_.pages.chunks``: a bit per 8 KiB page in use, a bit per page given back):
  "go heap" (pages in spans: objects, goroutine stacks, GC buffers), "go heap free" (free, not given
  back: their sizes add up to ``retained``; their resident pages are what the runtime really keeps
  in RAM, as a span's untouched pages are not resident), "go heap released", "go heap unused"
  (arena address space the page allocator does not manage yet), all ``heap=True``; then each arena's
  ``heapArena`` metadata, the arena index and the page allocator's summary reservations
  (``heap=False``). Not the span structures (fixalloc chunks from persistentalloc: no list of
  them to read). "go heap" also holds pages the runtime counts elsewhere (each P's page cache; the
  pages before a randomized heap base): 2.2 MiB more than HeapInuse + StackInuse measured.
- ``settings``: GOGC and GOMEMLIMIT as the runtime holds them, GOGC/GOMEMLIMIT/GODEBUG from the
  process's environment, the build's DefaultGODEBUG and GOEXPERIMENT.

Where the program is stripped, the figures are None with a note saying why. Its heap's ranges come
from mapping shapes only where they can be told: a Go 1.26 heap sits at a random 64 MiB-aligned
address (GOEXPERIMENT randomizedheapbase64, on by default), earlier ones at the arena hints
(0x00c0<<32 + i<<40 on amd64); the runs of anonymous private mappings that start and end on
64 MiB boundaries are taken as the heap in a program without libc only (glibc's thread arenas have the
same shape), and the route says so.

A note for the layers: goroutine stacks are allocated from the heap's spans (StackInuse), so a
thread's stack pointer lands inside a heap arena: memgap's ``--regions`` called 5.3 MiB of the Go heap
"thread stack" (issue 24); these ranges say whose it is.

``notes`` also say HeapSys, and the bytes of live objects (runtime/metrics'
``/memory/classes/heap/objects``: the slots' alloc and free counts times the size class table read
from the process) against in_use: the rest of in_use is free slots in spans that keep a live object.

Cost, measured on tests/programs/go_heap (RSS 290 MiB, 448 MiB of arenas) on a loaded 2-core machine:
detect 4-8 ms (the program's .symtab), the first read 90-300 ms (its DWARF parsed, once per build),
then 1-6 ms a read (0.3 ms of figures; the rest the arenas' 112 page bitmaps, 1,300 ranges).

Checked on Go 1.26.8 (linux/amd64, and -buildmode=pie): DWARF 5, compressed sections; and on Go 1.19.8
(Debian 12's golang-1.19-go: DWARF 4): the same globals and consistent-read protocol, with
``mheap_.allArenas`` for ``heapArenas`` (no user arenas before 1.20), ``runtime.class_to_size`` for the
size class table, and ``heapStatsDelta.inPtrScalarBits`` (unrolled GC program bitmaps: part of its GCSys
and of its consistency check), each said in a note; its heap figures read within 0.3% of its
ReadMemStats at rest. Its scavenger gives back what a drop freed within seconds (Go 1.26's keeps it),
so "retained" falls to near zero there: a fact of that runtime, not of the reading. A Go release that
renames a field is told in the notes (the field named), never read at a guessed offset.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING

from memgap.errors import MalformedInput
from memgap.runtimes import register
from memgap.runtimes.base import OwnedRange, ProcessView, RuntimeHeap, RuntimeInfo
from memgap.runtimes.go_binary import GoBinary, read_go_binary
from memgap.sources.procfs import Mapping, ProcReader

# The runtime's state (its layout from DWARF, the figures) is loaded only to read a Go program's heap:
# every look asks whether a process is Go, and importing it (with the DWARF reader) cost that 25 ms.
if TYPE_CHECKING:
    from memgap.runtimes.go_state import Field, GoFigures, Layout

ATTEMPTS = 40                    # torn reads read again, this many times at most
MAX_PS = 1 << 12                 # GOMAXPROCS is capped at 1024 (more: not a P list)
MAX_ARENAS = 1 << 20             # 64 TiB of arenas: more is not an arena list
TOLERANCE = 0.01                 # a busy runtime's two counts, accepted this far apart (said in the notes)
ARENA_BYTES_64 = 64 << 20
HINTS = {"amd64": 0x00C0 << 32, "arm64": 0x0040 << 32}


def _exe(process: ProcessView) -> str:
    return f"{process.reader.base}/exe"


def _binary(process: ProcessView) -> GoBinary | None:
    try:
        binary = read_go_binary(_exe(process))
    except (OSError, MalformedInput):
        return None
    return dataclasses.replace(binary, path=_exe(process)) if binary is not None else None


class GoReader:
    """The Go runtime's reader (registered as "go")."""

    def detect(self, process: ProcessView) -> RuntimeInfo | None:
        binary = _binary(process)
        if binary is None:
            return None
        has_symbols = "runtime.mheap_" in binary.symbols
        how = "build info in the program's .go.buildinfo" if binary.build else "runtime symbols in .symtab"
        if has_symbols and binary.build:
            how += " and runtime symbols in .symtab"
        if not has_symbols:
            how += "; no .symtab (stripped: -ldflags=-s)"
        elif not binary.has_dwarf:
            how += "; no DWARF (-ldflags=-w)"
        return RuntimeInfo("go", binary.version, how, stripped=not (has_symbols and binary.has_dwarf))

    def read(self, process: ProcessView, info: RuntimeInfo) -> RuntimeHeap:
        from memgap.runtimes.go_state import LayoutMissing

        binary = _binary(process)
        heap = RuntimeHeap(info, route="")
        heap.settings.update(_settings(process, binary))
        if binary is None or info.stripped:
            return _read_stripped(process, binary, heap)
        try:
            layout = _layout(binary, _load_bias(process, binary))
        except (LayoutMissing, MalformedInput) as exc:
            heap.route = "outside: nothing read (the program's DWARF lacks what the reader needs)"
            heap.notes.append(f"not read: the program's DWARF lacks {exc} (a Go release this reader does not know)")
            return heap
        started = time.perf_counter()
        found, attempts = read_consistent(process.reader, layout)
        if found is None:
            heap.route = f"outside: /proc/{process.pid}/mem, nothing read in {attempts} reads"
            heap.notes.append(f"not read: {attempts} reads of the runtime's statistics were each torn or "
                              "implausible (a runtime allocating fast, or a release this reader misreads)"
                              if attempts == ATTEMPTS else "not read: the runtime's globals are not readable "
                              "where the program's DWARF puts them (the process exited, or it is not this file)")
            return heap
        _fill(heap, found, attempts)
        if layout.substitutes:  # an older release: what it has in place of what the reader names first
            read_through = "; ".join(layout.substitutes)
            heap.notes.append(f"{info.version or 'this release'}'s runtime read through: {read_through}")
        heap.ranges = owned_ranges(process.reader, layout)
        elapsed = (time.perf_counter() - started) * 1000
        heap.route = (f"outside: /proc/{process.pid}/mem at runtime.memstats, runtime.gcController and "
                      f"runtime.mheap_, offsets from the program's DWARF (build id {binary.build_id or '?'}); "
                      f"not stopped; {attempts} read(s), {elapsed:.1f} ms")
        return heap


def _layout(binary: GoBinary, bias: int) -> Layout:
    """The layout from the runtime's units of the DWARF; from all of it where they lack something."""
    from memgap.runtimes.go_state import LayoutMissing, resolve_layout

    try:
        layout = resolve_layout(binary.dwarf(), bias, binary.goarch)
    except LayoutMissing:
        return resolve_layout(binary.dwarf(everything=True), bias, binary.goarch)
    if layout.objects is None or layout.pages is None:  # optional parts: looked for in every unit
        return resolve_layout(binary.dwarf(everything=True), bias, binary.goarch)
    return layout


def _settings(process: ProcessView, binary: GoBinary | None) -> dict[str, str]:
    out = {f"{name} (environment)": process.environ[name] for name in ("GOGC", "GOMEMLIMIT", "GODEBUG")
           if name in process.environ}
    build = binary.build.settings if binary is not None and binary.build is not None else {}
    for name in ("DefaultGODEBUG", "GOEXPERIMENT"):
        if build.get(name):
            out[f"{name} (build)"] = build[name]
    return out


def _load_bias(process: ProcessView, binary: GoBinary) -> int:
    """How far a position-independent program was moved from its link addresses (its mapping of file
    offset 0 against its first PT_LOAD's address)."""
    from memgap.runtimes.go_state import MASK64

    if not binary.pie:
        return 0
    try:
        exe = process.exe or os.readlink(_exe(process))
    except OSError:
        return 0
    starts = [m.start for m in process.maps if m.offset == 0 and m.path in (exe, f"{exe} (deleted)")]
    return (min(starts) - binary.base_vaddr) & MASK64 if starts else 0


def _read_field(reader: ProcReader, f: Field) -> int | None:
    from memgap.runtimes.go_state import scalar

    data = reader.read_memory(f.address, f.size)
    return None if data is None else scalar(data, 0, f.size)


def _markers(reader: ProcReader, layout: Layout) -> tuple[int, ...] | None:
    """gen, the noPLock key and every P's statsSeq: what says a writer or a reader is at work."""
    from memgap.runtimes.go_state import MASK64, scalar

    gen, lock = _read_field(reader, layout.gen), _read_field(reader, layout.no_p_lock)
    header = reader.read_memory(layout.allp, 16)
    if gen is None or lock is None or header is None:
        return None
    base, count = scalar(header, 0, 8), scalar(header, 8, 8)
    if not 0 < count <= MAX_PS:
        return None
    pointers = reader.read_memory(base, 8 * count)
    if pointers is None:
        return None
    seqs = reader.read_many([(scalar(pointers, 8 * i, 8) + layout.stats_seq) & MASK64 for i in range(count)], 4)
    if any(s is None for s in seqs):
        return None
    return (gen, lock, *(scalar(s, 0, 4) for s in seqs if s is not None))


class Unreadable(Exception):
    """The runtime's globals are not readable where the program's DWARF puts them."""


def _read_once(reader: ProcReader, layout: Layout, sizes: bytes | None) -> GoFigures | None:
    """One read between two looks at the markers; None where it may be torn."""
    from memgap.runtimes.go_state import figures, slot_is_zero

    before = _markers(reader, layout)
    if before is None:
        raise Unreadable
    if before[0] > 2 or before[1] & 1 or any(s & 1 for s in before[2:]):
        return None
    # the slot after gen zero, looked at before the others: a merge in the runtime (which zeroes it
    # last) is over, so the slots read next are not half-merged
    after_gen = (before[0] + 1) % 3
    zero = reader.read_memory(layout.stats + after_gen * layout.delta_size, layout.delta_size)
    if zero is None or any(zero):
        return None
    stats = reader.read_memory(layout.stats, 3 * layout.delta_size)
    if stats is None or not slot_is_zero(stats, layout, after_gen):
        return None
    fields = {**layout.sys, **layout.gc, "span_inuse": layout.span_inuse, "cache_inuse": layout.cache_inuse}
    scalars = {name: _read_field(reader, f) for name, f in fields.items()}
    if _markers(reader, layout) != before or any(v is None for v in scalars.values()):
        return None
    found = figures(stats, {k: v for k, v in scalars.items() if v is not None}, layout, sizes)
    return found if found.plausible() else None


def read_consistent(reader: ProcReader, layout: Layout) -> tuple[GoFigures | None, int]:
    """The first read at a quiet moment (the runtime's counts agree exactly), else the closest one
    within TOLERANCE; (None, attempts) where none."""
    best: GoFigures | None = None
    o = layout.objects
    sizes = reader.read_memory(o.sizes.address, o.classes * o.sizes.size) if o is not None else None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            found = _read_once(reader, layout, sizes)
        except Unreadable:
            return None, attempt
        if found is not None and found.drift == 0:
            return found, attempt
        if found is not None and (best is None or found.drift < best.drift):
            best = found
        time.sleep(0.0002 * attempt)
    if best is not None and best.drift <= TOLERANCE * max(best.consistent["committed"], 1):
        return best, ATTEMPTS
    return None, ATTEMPTS


def _fill(heap: RuntimeHeap, f: GoFigures, attempts: int) -> None:
    heap.in_use, heap.retained, heap.released = f.heap_inuse, f.heap_free, f.heap_released
    heap.committed = f.heap_inuse + f.heap_free
    heap.limit = f.memory_limit if 0 < f.memory_limit < (1 << 63) - 1 else None
    heap.metadata = {"stacks": f.stack_inuse, "os stacks": f.sys["stacks_sys"],
                     "gc metadata": f.sys["gcMiscSys"] + f.work_bufs + f.gc_prog_bits,
                     "mspan/mcache": f.mspan_inuse + f.mcache_inuse,
                     "other": f.sys["other_sys"] + f.sys["buckhash_sys"]}
    heap.settings["GOGC (runtime)"] = "off" if f.gc_percent < 0 else str(f.gc_percent)
    heap.settings["GOMEMLIMIT (runtime)"] = str(heap.limit) if heap.limit is not None else "unset"
    heap.notes.append(f"HeapSys {f.heap_inuse + f.heap_free + f.heap_released} bytes (in use + retained + released)")
    if f.objects is not None:
        heap.notes.append(f"live objects {f.objects} bytes of the {f.heap_inuse} in use (runtime/metrics' "
                          f"/memory/classes/heap/objects); the other {f.heap_inuse - f.objects} are free slots "
                          "in spans that still hold a live object: the GC keeps them, FreeOSMemory cannot return them")
    if f.drift:
        heap.notes.append(f"read while the runtime allocated: its two counts of the heap differed by {f.drift} "
                          f"bytes after {attempts} reads (within {TOLERANCE:.0%})")


def owned_ranges(reader: ProcReader, layout: Layout) -> list[OwnedRange]:
    """The heap arenas, their metadata, the arena index and the page summary reservations."""
    from memgap.runtimes.go_state import Field, arena_ranges, scalar

    header = reader.read_memory(layout.heap_arenas, 16)
    if header is None:
        return []
    base, count = scalar(header, 0, 8), scalar(header, 8, 8)
    data = reader.read_memory(base, 8 * count) if 0 < count <= MAX_ARENAS else None
    if data is None:
        return []
    indexes = [scalar(data, 8 * i, 8) for i in range(count)]
    arenas = arena_ranges(indexes, layout)
    pages = _arena_pages(reader, layout, arenas) if layout.pages is not None else None
    out = ([OwnedRange(lo, hi, label, free=label != "go heap") for lo, hi, label in pages] if pages is not None
           else [OwnedRange(start, end, "go heap") for start, end in arenas])
    l2 = _read_field(reader, Field(layout.arenas_l1, 8))
    if l2 and layout.l2_bytes:
        out.append(OwnedRange(l2, l2 + layout.l2_bytes, "go arena index", heap=False))
        metas = reader.read_many([l2 + 8 * (i % (layout.l2_bytes // 8)) for i in indexes], 8)
        for meta in metas:
            at = scalar(meta, 0, 8) if meta is not None else 0
            if at and layout.heap_arena_size:
                out.append(OwnedRange(at, at + layout.heap_arena_size, "go heap arena metadata", heap=False))
    levels = reader.read_memory(layout.summary, 24 * layout.summary_levels) if layout.summary_levels else None
    for level in range(layout.summary_levels if levels is not None else 0):
        at, cap = scalar(levels or b"", 24 * level, 8), scalar(levels or b"", 24 * level + 16, 8)
        if at and 0 < cap < 1 << 40:
            out.append(OwnedRange(at, at + cap * 8, "go page summary", heap=False))
    return out


def _arena_pages(reader: ProcReader, layout: Layout, arenas: list[tuple[int, int]]
                 ) -> list[tuple[int, int, str]] | None:
    """The arenas' pages by state, from the page allocator's bitmaps (each chunk's 128 bytes read
    once: a page taken or freed during the read moves one page's label, no more); None where a
    chunk the allocator manages cannot be read."""
    from memgap.runtimes.go_state import MASK64, PAGE_LABELS, Field, join_runs, page_runs, scalar

    pages = layout.pages
    assert pages is not None
    header = reader.read_memory(pages.in_use, 16)
    if header is None:
        return None
    base, count = scalar(header, 0, 8), scalar(header, 8, 8)
    raw = reader.read_memory(base, 16 * count) if 0 < count <= MAX_ARENAS else None
    if raw is None:
        return None
    in_use = [(scalar(raw, 16 * i, 8), scalar(raw, 16 * i + 8, 8)) for i in range(count)]
    runs: list[tuple[int, int, str]] = []
    directory: dict[int, int] = {}
    for start, end in arenas:
        for chunk in range(start, end, pages.chunk_bytes):
            index = ((chunk - layout.arena_base) & MASK64) // pages.chunk_bytes
            l1, l2 = index >> pages.l2_bits, index & ((1 << pages.l2_bits) - 1)
            if l1 not in directory:
                directory[l1] = _read_field(reader, Field(pages.chunks + 8 * l1, 8)) or 0
            data = reader.read_memory(directory[l1] + l2 * pages.data_size, pages.data_size) if directory[l1] else None
            if data is None and any(lo < chunk + pages.chunk_bytes and chunk < hi for lo, hi in in_use):
                return None
            runs += (page_runs(chunk, data, pages, in_use) if data is not None
                     else [(chunk, chunk + pages.chunk_bytes, PAGE_LABELS["-"])])
    return join_runs(runs)


def shape_ranges(maps: list[Mapping], goarch: str, randomized: bool) -> list[tuple[int, int]]:
    """The heap arenas told from mapping shapes alone: runs of adjacent anonymous private mappings
    that start and end on 64 MiB boundaries with something readable in them; at an arena hint
    (0x00c0<<32 | i<<40 on amd64) where the heap base is not randomized. [] where nothing fits."""
    runs: list[list[Mapping]] = []
    for m in sorted(maps, key=lambda m: m.start):
        if m.is_file or m.path or m.perms[3] != "p":
            continue
        if runs and runs[-1][-1].end == m.start:
            runs[-1].append(m)
        else:
            runs.append([m])
    hint = HINTS.get(goarch)
    out = []
    for run in runs:
        start, end = run[0].start, run[-1].end
        if start % ARENA_BYTES_64 or end % ARENA_BYTES_64 or not any(m.perms.startswith("rw") for m in run):
            continue
        if not randomized and (hint is None or start & ((1 << 40) - 1) != hint):
            continue
        out.append((start, end))
    return out


def _randomized(binary: GoBinary | None) -> bool:
    """Whether the heap base is random (Go 1.26's default; GOEXPERIMENT=norandomizedheapbase64 turns it off)."""
    if binary is None or binary.build is None:
        return True
    experiments = binary.build.settings.get("GOEXPERIMENT", "")
    version = binary.version.removeprefix("go").split(".")
    try:
        major, minor = int(version[0]), int(version[1].split("rc")[0].split("beta")[0])
    except (IndexError, ValueError):
        return True
    return (major, minor) >= (1, 26) and "norandomizedheapbase64" not in experiments


def _read_stripped(process: ProcessView, binary: GoBinary | None, heap: RuntimeHeap) -> RuntimeHeap:
    why = ("no .symtab (built with -ldflags=-s)" if heap.info.stripped and binary is not None
           and "runtime.mheap_" not in binary.symbols else "no DWARF (built with -ldflags=-w)")
    heap.notes.append(f"figures not read: the program has {why}, so the runtime's globals and their fields "
                      "cannot be found; a build without -s -w would allow it (or the program's own "
                      "runtime/metrics, or GODEBUG=gctrace=1 on its stderr at each GC)")
    randomized = _randomized(binary)
    libc = any("libc.so" in m.path or "libc-" in m.path for m in process.maps)
    if randomized and libc:
        heap.route = ("outside: build info only; no heap ranges (a random heap base beside libc's arenas: "
                      "not told apart)")
        return heap
    found = shape_ranges(process.maps, binary.goarch if binary else "", randomized)
    heap.ranges = [OwnedRange(start, end, "go heap") for start, end in found]
    shape = ("64 MiB-aligned runs of anonymous mappings (a random heap base; no libc mapped)" if randomized
             else "64 MiB-aligned runs of anonymous mappings at the runtime's arena hints")
    heap.route = f"outside: build info only; heap ranges from mapping shapes: {shape}"
    return heap


register("go", GoReader())
