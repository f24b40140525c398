"""V8's heap (Node.js, and any program embedding V8), read from outside without stopping the process.

Told (``detect``): the program, or a libnode/libv8 library in its maps, defines ``v8::V8::Initialize``
(.dynsym or .symtab); the version is V8's own string in that file's .rodata (the one after the
``libv8-%d.%d.%d%s%s.so`` format of V8's version.cc), and Node's ``node.js/vX.Y.Z``. The file is read,
never run: running ``/proc/PID/exe --version`` of another user's program as root is unsafe.

Read (``read``): V8 keeps its heap in pages (256 KiB, aligned to 256 KiB; large-object pages bigger),
each an anonymous mapping of its own, each starting with a header, ``BasicMemoryChunk`` (V8
src/heap/basic-memory-chunk.h and memory-chunk-layout.h): size, flags, the owning ``Heap*`` (one per
isolate), area_start, area_end, allocated_bytes, wasted_memory, high_water_mark, the owning space,
then its reservation (page allocator, address, size). Every resident 256 KiB-aligned address of the
readable anonymous mappings is a candidate; its 96 bytes are read through /proc/PID/mem (a pread:
the process runs on) and kept only if they hold together: the area inside the page, the page mapped
to its end, the reservation naming the page itself (or none, for read-only pages), counts no larger
than the area, flags in 32 bits. Pages group by their ``Heap*`` (an isolate: the main thread and
each worker thread), then by owner (a space), named from the page flags (V8 11.1+ numbering:
from/to page bits 3 and 4, large page bit 7; code where the page's area is executable; read-only
pages carry no heap).

Figures, per space and summed over the isolates:

- ``committed``: the pages' sizes, what V8's ``getHeapStatistics().total_heap_size`` counts (the
  shared read-only space is left out, as V8 does: it is ``metadata["read_only_space"]``);
- resident: the pages' present pages in /proc/PID/pagemap (the kernel's count, where V8's
  ``total_physical_size`` is its own estimate); ``released`` is committed minus resident (pages V8
  discarded or never touched);
- ``in_use``: the pages' ``allocated_bytes``: objects plus the linear allocation area V8 allocates
  from (V8's ``used_heap_size`` leaves the latter out: a few KiB to a page per space). The new
  space's pages do not count their objects (V8 keeps its top elsewhere): its bytes are counted as
  not in use, which at rest after a collection is within a few hundred KiB of what V8 says;
- ``retained``: resident minus in use: free heap memory V8 keeps resident (mostly free space on old
  pages after a drop, and the new space's two semi-spaces). A moment's figure: V8's memory reducer
  compacts and shrinks a heap it finds idle (measured on Node 20: 118 MiB committed, 101 retained,
  down to 16 and 0 some 20 to 40 s after the program went idle, its 10 ms timer running).

Ranges: every page, "v8 heap" (its code pages "v8 code", both heap); the read-only pages "v8
read-only space" (metadata). Not claimed: the code range's reservation (PROT_NONE but its code
pages: no resident memory), and what V8 and Node allocate with malloc (``malloced_memory``, and
Node's Buffers and ArrayBuffers' backing stores, ``external_memory``): they live in glibc's arenas
and are read as memgap reads malloc.

Where no header validates (another layout: V8 12 moved the page metadata out of the page), the pages
are taken from their mappings' shapes (anonymous, read-write, starting on 256 KiB, at most 256 KiB,
not a glibc heap): committed and resident only, no in-use split, said in the notes.

The deep route, ``read_deep``, only when the caller asks: V8's own getHeapStatistics() through Node's
inspector (memgap.runtimes.v8_inspector). It changes the process: SIGUSR1 opens the inspector on
127.0.0.1:9229 (or its --inspect-port), which stays open (any local user reaching the port can then
run code in the process) and Node writes "Debugger listening..." to its stderr.

Checked on V8 11.3.244.8-node.38 (Node v20.20.2, pointer compression off: Node's default build).
The header fields up to the reservation have kept their places since V8 8; the flag numbering
changed in V8 11.1 (large page was bit 5 before), so older versions are read with that numbering,
unchecked here, as the notes say.
"""
from __future__ import annotations

import bisect
import functools
import mmap
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from memgap.errors import MalformedInput, MemgapError
from memgap.runtimes import register
from memgap.runtimes.base import OwnedRange, ProcessView, RuntimeHeap, RuntimeInfo
from memgap.sources.allocator import process_root
from memgap.sources.elf import SymbolQuery, read_elf
from memgap.sources.procfs import PAGE_SIZE, Mapping, present_bitmap

PAGE_ALIGNMENT = 256 << 10      # kPageSizeBits = 18 (V8 8 to 11)
HEADER = struct.Struct("<12Q")  # size, flags, heap, area_start, area_end, allocated, wasted, hwm, owner, reservation
MAX_HEADER_AREA = 64 << 10      # area_start - page: the header (4.3 KiB), and a code page's guard pages
FROM_PAGE, TO_PAGE = 1 << 3, 1 << 4
INIT_SYMBOLS = ("_ZN2v82V810InitializeEi", "_ZN2v82V810InitializeEv")
_INIT_QUERY = SymbolQuery(names=frozenset(INIT_SYMBOLS))  # the only symbols read of a program for V8
_GLIBC_HEAP = 64 << 20          # glibc's non-main arenas: 64 MiB-aligned heaps, rw then PROT_NONE


class PageHeader(NamedTuple):
    address: int
    size: int
    flags: int
    heap: int       # the isolate's Heap*; 0 on read-only pages (shared, detached)
    area_start: int
    area_end: int
    allocated: int  # objects and the linear allocation area on the page
    owner: int      # the space's address


def parse_page_header(data: bytes, address: int) -> PageHeader | None:
    """The page header in ``data`` (96 bytes read at ``address``), or None unless it holds together."""
    if len(data) != HEADER.size:
        return None
    size, flags, heap, start, end, allocated, wasted, hwm, owner, _alloc, res_addr, res_size = HEADER.unpack(data)
    if size < PAGE_SIZE or size % PAGE_SIZE or size > 1 << 40 or flags >> 32:
        return None
    if not address < start < end <= address + size or start - address > MAX_HEADER_AREA:
        return None
    area = end - start
    if allocated > area or wasted > area or hwm > size or heap % 8 or owner % 8:
        return None
    if heap:  # a page of an isolate owns its reservation: it names the page itself
        if not owner or (res_addr, res_size) != (address, size):
            return None
    elif owner or res_addr or res_size:  # a read-only page, detached: no heap, no owner, no reservation
        return None
    return PageHeader(address, size, flags, heap, start, end, allocated, owner)


def parse_versions(rodata: bytes) -> tuple[str, str]:
    """(V8's version, Node's version) from an object's .rodata; "" where not found."""
    v8 = ""
    anchor = rodata.find(b"libv8-%d.%d.%d%s%s.so\x00")
    if anchor >= 0:
        tail = rodata[anchor + 22:anchor + 86]
        found = re.match(rb"(\d{1,3}\.\d{1,3}\.\d{1,5}(?:\.\d{1,5})?(?:-[\w.]{1,32})?)\x00", tail)
        v8 = found.group(1).decode() if found else ""
    node = re.search(rb"\x00node\.js/v(\d{1,3}\.\d{1,3}\.\d{1,3})\x00", rodata)
    return v8, node.group(1).decode() if node else ""


def version_tuple(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


@dataclass
class Space:
    """One space's pages, summed (over every isolate where the census sums them)."""

    name: str
    pages: int = 0
    committed: int = 0
    resident: int = 0
    in_use: int | None = 0   # None: its pages do not count their objects (the new space)

    def add(self, page: PageHeader, resident: int) -> None:
        self.pages += 1
        self.committed += page.size
        self.resident += resident
        if self.in_use is not None:
            self.in_use += page.allocated


@dataclass
class Isolate:
    """One V8 heap (an isolate: Node's main thread, or a worker's), by space."""

    heap: int
    spaces: dict[str, Space] = field(default_factory=dict)


@dataclass
class Census:
    """What the page headers say: per isolate, the read-only pages, and every page with its space."""

    isolates: list[Isolate] = field(default_factory=list)
    read_only: Space = field(default_factory=lambda: Space("read_only_space"))
    pages: list[tuple[PageHeader, str]] = field(default_factory=list)
    candidates: int = 0      # resident 256 KiB-aligned addresses read
    route: str = "headers"   # or "shapes": no header validated, pages taken from mapping shapes
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, Space]:
        """Every space summed over the isolates, by name."""
        out: dict[str, Space] = {}
        for iso in self.isolates:
            for name, sp in iso.spaces.items():
                tot = out.setdefault(name, Space(name, in_use=0 if sp.in_use is not None else None))
                tot.pages, tot.committed, tot.resident = tot.pages + sp.pages, tot.committed + sp.committed, \
                    tot.resident + sp.resident
                if tot.in_use is not None and sp.in_use is not None:
                    tot.in_use += sp.in_use
        return out


def _kind(page: PageHeader, executable: bool, large_bit: int) -> str:
    """What a page's flags and mapping say it is: its space's name, but for the paged spaces."""
    large = bool(page.flags & large_bit)
    if page.flags & (FROM_PAGE | TO_PAGE):
        return "new_large_object_space" if large else "new_space"
    if executable:
        return "code_large_object_space" if large else "code_space"
    return "large_object_space" if large else "paged"


def name_spaces(pages: Sequence[PageHeader], executable: set[int], version: str) -> dict[tuple[int, int], str]:
    """(heap, owner) -> the space's name as V8's getHeapSpaceStatistics says it. The paged space with
    the most pages of an isolate is its old space; another is its map space before V8 11 (else
    "other_paged_space"). An owner whose pages disagree is "unnamed_space"."""
    large_bit = 1 << 7 if version_tuple(version) >= (11, 1) else 1 << 5
    kinds: dict[tuple[int, int], set[str]] = {}
    counts: dict[tuple[int, int], int] = {}
    for page in pages:
        key = (page.heap, page.owner)
        kinds.setdefault(key, set()).add(_kind(page, page.address in executable, large_bit))
        counts[key] = counts.get(key, 0) + 1
    names: dict[tuple[int, int], str] = {}
    for key, found in kinds.items():
        names[key] = found.pop() if len(found) == 1 else "unnamed_space"
    second = "map_space" if version_tuple(version) < (11, 0) else "other_paged_space"
    for heap in {h for h, _ in names}:
        paged = sorted((k for k, n in names.items() if k[0] == heap and n == "paged"), key=lambda k: -counts[k])
        for i, key in enumerate(paged):
            names[key] = "old_space" if i == 0 else second
    return names


def build_census(pages: Sequence[tuple[PageHeader, int]], executable: set[int], version: str) -> Census:
    """The census of validated ``pages`` (each with its resident bytes)."""
    census = Census()
    names = name_spaces([p for p, _ in pages if p.heap], executable, version)
    isolates: dict[int, Isolate] = {}
    for page, resident in pages:
        if not page.heap:
            census.read_only.add(page, resident)
            census.pages.append((page, "read_only_space"))
            continue
        name = names[(page.heap, page.owner)]
        iso = isolates.setdefault(page.heap, Isolate(page.heap))
        space = iso.spaces.setdefault(name, Space(name, in_use=None if name == "new_space" else 0))
        space.add(page, resident)
        census.pages.append((page, name))
    census.isolates = sorted(isolates.values(), key=lambda i: -sum(s.committed for s in i.spaces.values()))
    return census


class MemoryReader(Protocol):
    def read_many(self, addresses: list[int], size: int) -> Sequence[bytes | None]: ...

    def pagemap(self, start: int, end: int) -> bytes: ...


class Residency:
    """Present pages of the readable anonymous mappings (one pagemap read each), looked up by range."""

    def __init__(self, reader: MemoryReader, mappings: Sequence[Mapping]) -> None:
        self.spans = sorted((m.start, m.end, present_bitmap(reader.pagemap(m.start, m.end))) for m in mappings)
        self.starts = [s for s, _, _ in self.spans]

    def resident(self, start: int, end: int) -> int:
        """Resident bytes of [start, end) in those mappings."""
        total = 0
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        while i < len(self.spans) and self.spans[i][0] < end:
            s, e, bits = self.spans[i]
            lo, hi = max(s, start), min(e, end)
            if lo < hi:
                total += bits[(lo - s) // PAGE_SIZE:(hi - s) // PAGE_SIZE].count(1)
            i += 1
        return total * PAGE_SIZE


def _anonymous(m: Mapping) -> bool:
    return m.readable and not m.is_file and (m.path == "" or m.path.startswith("[anon:"))


def candidates(res: Residency) -> list[int]:
    """Every resident 256 KiB-aligned address of the mappings ``res`` covers, in order."""
    out: list[int] = []
    for start, end, bits in res.spans:
        first = -(-start // PAGE_ALIGNMENT) * PAGE_ALIGNMENT
        out.extend(a for a in range(first, end, PAGE_ALIGNMENT) if bits[(a - start) // PAGE_SIZE])
    return out


def find_pages(reader: MemoryReader, maps: Sequence[Mapping]) -> tuple[list[tuple[PageHeader, int]], set[int], int]:
    """Every valid page header in the process's anonymous memory, each with its resident bytes; the
    pages whose area is executable (code); and how many candidates were read. An address inside a page
    already found is not read (a large object's bytes are not a header)."""
    res = Residency(reader, [m for m in maps if _anonymous(m)])
    cands = candidates(res)
    spans = sorted((m.start, m.end, m.perms) for m in maps)
    starts = [s for s, _, _ in spans]

    def mapping_at(address: int) -> tuple[int, int, str] | None:
        i = bisect.bisect_right(starts, address) - 1
        return spans[i] if i >= 0 and spans[i][0] <= address < spans[i][1] else None

    pages: list[tuple[PageHeader, int]] = []
    executable: set[int] = set()
    covered = 0
    for address, data in zip(cands, reader.read_many(cands, HEADER.size), strict=True):
        if address < covered or data is None:
            continue
        page = parse_page_header(data, address)
        if page is None or mapping_at(page.address + page.size - 1) is None:
            continue
        covered = page.address + page.size
        pages.append((page, res.resident(page.address, covered)))
        area = mapping_at(page.area_start)
        if area is not None and area[2][2] == "x":
            executable.add(page.address)
    return pages, executable, len(cands)


def shape_pages(maps: Sequence[Mapping]) -> list[Mapping]:
    """Mappings shaped like V8's regular pages (no header to read them by): anonymous, read-write,
    starting on 256 KiB, at most 256 KiB; not a glibc heap (64 MiB-aligned, its reservation after it)."""
    out: list[Mapping] = []
    for i, m in enumerate(maps):
        if not (_anonymous(m) and m.writable and m.start % PAGE_ALIGNMENT == 0 and m.size <= PAGE_ALIGNMENT):
            continue
        after = maps[i + 1] if i + 1 < len(maps) else None
        if m.start % _GLIBC_HEAP == 0 and after is not None and after.start == m.end and after.perms[0] == "-":
            continue
        out.append(m)
    return out


def read_census(reader: MemoryReader, maps: Sequence[Mapping], version: str) -> Census:
    """The census of V8's pages in a process, from their headers, else from mapping shapes."""
    pages, executable, read = find_pages(reader, maps)
    census = build_census(pages, executable, version)
    census.candidates = read
    if census.isolates:
        if version_tuple(version) != (11, 3):
            census.notes.append(f"page flags read with V8 {'11.1+' if version_tuple(version) >= (11, 1) else '8-11.0'}"
                                f" numbering; checked on V8 11.3 only (this is {version or 'an untold version'})")
        return census
    census.route = "shapes"
    shaped = shape_pages(maps)
    res = Residency(reader, shaped)
    space = Space("pages_by_shape", in_use=None)
    for m in shaped:
        fake = PageHeader(m.start, m.size, 0, 0, m.start, m.end, 0, 0)
        space.add(fake, res.resident(m.start, m.end))
        census.pages.append((fake, "pages_by_shape"))
    census.isolates = [Isolate(0, {"pages_by_shape": space})] if shaped else []
    census.notes.append(f"no V8 page header validated among {read} candidates (another layout than V8 8-11's): "
                        f"{len(shaped)} mappings shaped like V8 pages counted, committed and resident only")
    return census


_SETTINGS = ("max-old-space-size", "max-semi-space-size", "max-young-generation-size", "max-heap-size",
             "initial-old-space-size", "optimize-for-size", "expose-gc", "gc-interval", "single-threaded-gc")


def parse_settings(cmdline: Sequence[str], environ: dict[str, str]) -> dict[str, str]:
    """The V8 options that govern its heap's size and retention, from the command line (before the
    script: what follows it is the script's) and NODE_OPTIONS; underscores read as dashes, as V8 does."""
    words = list(cmdline[1:])
    for i, word in enumerate(words):
        if not word.startswith("-"):
            words = words[:i]  # the script: the rest is its own arguments
            break
    words += environ.get("NODE_OPTIONS", "").split()
    out: dict[str, str] = {}
    for word in words:
        name, _, value = word.lstrip("-").replace("_", "-").partition("=")
        if name in _SETTINGS:
            out[name] = value or "on"
    return out


@functools.lru_cache(maxsize=64)
def _versions_of(path: str, _identity: tuple[int, int, int, int]) -> tuple[str, str]:
    offset, size = read_elf(path, _INIT_QUERY).sections.get(".rodata", (0, 0))
    if not size:
        return "", ""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return parse_versions(data[offset:offset + size])


def file_versions(path: str) -> tuple[str, str]:
    """(V8's version, Node's) from the file's .rodata, read once per version of the file."""
    st = os.stat(path)
    return _versions_of(path, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))


def _defines_v8(path: str) -> bool:
    try:
        info = read_elf(path, _INIT_QUERY)
    except (OSError, MalformedInput):
        return False
    return any(s in info.exported or s in info.defined for s in INIT_SYMBOLS)


def detect_v8(process: ProcessView) -> RuntimeInfo | None:
    """V8 in the process: its program or a mapped libnode/libv8 defines ``v8::V8::Initialize``."""
    base = process.reader.base
    objects = [(f"{base}/exe", process.exe or "its program")]
    root = process_root(base)
    libs = {m.path for m in process.maps if re.search(r"/lib(node|v8)[^/]*\.so", m.path)}
    objects += [(root + lib, lib) for lib in sorted(libs)]
    for path, shown in objects:
        if not _defines_v8(path):
            continue
        try:
            v8, node = file_versions(path)
        except (OSError, MalformedInput, ValueError):
            v8, node = "", ""
        how = f"v8::V8::Initialize defined in {shown}" + (f" (Node v{node})" if node else "")
        return RuntimeInfo("v8", v8, how)
    return None


def heap_from_census(info: RuntimeInfo, census: Census, settings: dict[str, str]) -> RuntimeHeap:
    """The RuntimeHeap the census says, summed over the isolates."""
    spaces = census.totals()
    committed = sum(s.committed for s in spaces.values())
    resident = sum(s.resident for s in spaces.values())
    in_use = None if census.route == "shapes" else sum(s.in_use or 0 for s in spaces.values())
    route = ("outside: V8's page headers (BasicMemoryChunk) read through /proc/PID/mem, residency from pagemap"
             if census.route == "headers" else "outside: mapping shapes (no page header validated), pagemap")
    heap = RuntimeHeap(info, route, in_use=in_use, committed=committed, released=committed - resident,
                       retained=None if in_use is None else max(0, resident - in_use), settings=dict(settings))
    if "max-old-space-size" in settings and settings["max-old-space-size"].isdigit():
        heap.limit = int(settings["max-old-space-size"]) << 20
    if census.read_only.pages:
        heap.metadata["read_only_space"] = census.read_only.resident
    for page, name in census.pages:
        label = {"read_only_space": "v8 read-only space", "code_space": "v8 code",
                 "code_large_object_space": "v8 code"}.get(name, "v8 heap")
        heap.ranges.append(OwnedRange(page.address, page.address + page.size, label, name != "read_only_space"))
    heap.notes.extend(census.notes)
    heap.notes.append(f"{len(census.isolates)} isolate(s), {sum(s.pages for s in spaces.values())} pages; "
                      + "; ".join(f"{s.name} {s.pages} pages, committed {s.committed}, resident {s.resident}, "
                                  f"in use {'not told' if s.in_use is None else s.in_use}" for s in spaces.values()))
    if "new_space" in spaces:
        heap.notes.append("the new space's objects are not counted in its page headers: counted as not in use")
    heap.notes.append("Buffers, ArrayBuffers and V8's own malloc'd memory live in malloc's arenas, not here")
    if "max-old-space-size" not in settings:
        heap.notes.append("no --max-old-space-size: V8 sized its heap limit from the machine's memory")
    return heap


def heap_from_statistics(info: RuntimeInfo, figures: dict[str, object], port: int, opened: bool) -> RuntimeHeap:
    """The RuntimeHeap of V8's own getHeapStatistics() (and getHeapSpaceStatistics()), as the inspector gave them."""
    stats = figures.get("heap")
    if not isinstance(stats, dict) or not all(isinstance(stats.get(k), int) and stats[k] >= 0 for k in
                                              ("total_heap_size", "total_physical_size", "used_heap_size",
                                               "heap_size_limit")):
        raise MalformedInput("inspector reply", "getHeapStatistics() without its figures")
    total, physical, used = stats["total_heap_size"], stats["total_physical_size"], stats["used_heap_size"]
    opened_note = (f"memgap sent SIGUSR1: Node's inspector now listens on 127.0.0.1:{port} and stays open"
                   if opened else f"Node's inspector was already open on 127.0.0.1:{port}")
    heap = RuntimeHeap(info, f"inspector: Runtime.evaluate of v8.getHeapStatistics() on 127.0.0.1:{port}",
                       in_use=used, retained=max(0, physical - used), released=max(0, total - physical),
                       committed=total, limit=stats["heap_size_limit"], notes=[opened_note])
    spaces = figures.get("spaces")
    for space in spaces if isinstance(spaces, list) else []:
        if isinstance(space, dict) and isinstance(space.get("space_name"), str):
            heap.notes.append(f"{space['space_name']}: size {space.get('space_size')}, used "
                              f"{space.get('space_used_size')}, physical {space.get('physical_space_size')}")
    heap.notes.append(f"V8's malloc'd memory {stats.get('malloced_memory')}, external (Buffers, ArrayBuffers) "
                      f"{stats.get('external_memory')}: in malloc's arenas")
    return heap


def read_deep(process: ProcessView, info: RuntimeInfo, timeout: float = 5.0) -> RuntimeHeap:
    """V8's own figures through Node's inspector (only when the caller asks: it changes the process).

    SIGUSR1 opens the inspector on 127.0.0.1 (9229, or the port of its --inspect-port), where it stays
    open; then one Runtime.evaluate of v8.getHeapStatistics() over its WebSocket. No ranges: the pages
    are the outside read's (``read``). Unsupported where the process does not catch SIGUSR1 (it would
    end it), or its inspector is set to listen elsewhere than loopback."""
    from memgap.runtimes.v8_inspector import evaluate_in, inspect_port

    reader = process.reader
    port = inspect_port(reader.cmdline(), process.environ or reader.environ())
    figures, opened = evaluate_in(reader.numeric_pid, reader.read_text("status"), port, timeout)
    return heap_from_statistics(info, figures, port, opened)


class V8Reader:
    """V8's reader: ``detect`` from its files, ``read`` from its page headers."""

    # why `inspect --deep` does not open Node's inspector (read_deep does, when called on purpose)
    deep_leaves_open = ("Node's inspector, opened by SIGUSR1, stays open on loopback after the read, and any "
                        "local user who reaches its port can run code in the process; V8's page headers read "
                        "from outside give its heap without it")

    def detect(self, process: ProcessView) -> RuntimeInfo | None:
        return detect_v8(process)

    def read(self, process: ProcessView, info: RuntimeInfo) -> RuntimeHeap:
        census = read_census(process.reader, process.maps, info.version)
        try:
            cmdline = process.reader.cmdline()
            environ = process.environ or process.reader.environ()
        except MemgapError:  # gone, or not ours to read: the figures stand without the options
            cmdline, environ = [], {}
        return heap_from_census(info, census, parse_settings(cmdline, environ))

    def read_deep(self, process: ProcessView, info: RuntimeInfo) -> RuntimeHeap:
        """V8's own figures through Node's inspector (``read_deep``: it opens a port in the process)."""
        return read_deep(process, info)


register("v8", V8Reader())
