"""glibc malloc: mallinfo2, malloc_info XML and malloc_trim, in this process.

The XML parser is pure; the ctypes calls are thin and only run where glibc's
malloc is the process's allocator (the caller checks that first).
"""
from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from memgap.errors import MalformedInput, Unsupported


@dataclass(frozen=True)
class Mallinfo2:
    """glibc's ``struct mallinfo2``: totals over all arenas, in bytes."""

    arena: int      # bytes from sbrk and thread heaps (non-mmapped), all arenas
    ordblks: int    # free chunks
    smblks: int     # free fastbin chunks
    hblks: int      # mmapped chunks
    hblkhd: int     # bytes in mmapped chunks
    usmblks: int
    fsmblks: int    # bytes in free fastbin chunks
    uordblks: int   # bytes in use in arenas
    fordblks: int   # bytes free in arenas
    keepcost: int   # top chunk of the main arena

    @property
    def in_use(self) -> int:
        """Bytes malloc handed out and not yet freed (arenas plus mmapped chunks)."""
        return self.uordblks + self.hblkhd


class _Mallinfo2Struct(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in Mallinfo2.__dataclass_fields__]


@dataclass
class ArenaInfo:
    """One ``<heap>`` of malloc_info: an arena, main (nr 0) or a thread arena."""

    nr: int
    system: int            # arena->system_mem: bytes the arena holds from the OS
    system_max: int
    fast_count: int
    fast_bytes: int        # free bytes in fastbins
    rest_count: int
    rest_bytes: int        # free bytes in bins plus the top chunk
    aspace_total: int      # address space of its heaps (size fields)
    aspace_mprotect: int   # of it, made read-write at some point
    subheaps: int = 0
    bins: list[tuple[int, int, int, int]] = field(default_factory=list)  # from, to, total, count
    unsorted: tuple[int, int, int, int] | None = None

    @property
    def free(self) -> int:
        return self.fast_bytes + self.rest_bytes

    @property
    def in_use(self) -> int:
        return max(0, self.system - self.free)

    @property
    def is_main(self) -> bool:
        return self.nr == 0


@dataclass
class MallocInfo:
    arenas: list[ArenaInfo]
    mmap_count: int
    mmap_bytes: int
    system: int
    system_max: int


def _attrs(line: str) -> dict[str, str]:
    """Attributes of a one-line empty element: ``<total type="fast" count="0" size="0"/>``."""
    parts = line.split('"')
    if len(parts) % 2 == 0 or not parts[-1].strip() == "/>":
        raise MalformedInput("malloc_info", f"bad element {line[:60]!r}")
    out = {}
    for i in range(0, len(parts) - 1, 2):
        key = parts[i].split()[-1] if parts[i].split() else ""
        if not key.endswith("="):
            raise MalformedInput("malloc_info", f"bad attribute in {line[:60]!r}")
        out[key[:-1]] = parts[i + 1]
    return out


def _number(attrs: dict[str, str], key: str, line: str) -> int:
    raw = attrs.get(key)
    if raw is None or not (raw.isascii() and raw.isdigit()):
        raise MalformedInput("malloc_info", f"{key}={raw!r} in {line[:60]!r}")
    return int(raw)


class _Block:
    """Counters of one <heap> (or of the document's totals) as they are read."""

    def __init__(self, nr: int) -> None:
        self.nr = nr
        self.totals: dict[str, tuple[int, int]] = {}
        self.sizes: dict[str, int] = {}
        self.bins: list[tuple[int, int, int, int]] = []
        self.unsorted: tuple[int, int, int, int] | None = None

    def add(self, tag: str, line: str) -> None:
        attrs = _attrs(line)
        if tag in ("size", "unsorted"):
            lo, hi, total, count = (_number(attrs, k, line) for k in ("from", "to", "total", "count"))
            entry = (lo, hi, total, count)
            if tag == "size":
                self.bins.append(entry)
            else:
                self.unsorted = entry
        elif tag == "total":
            self.totals[attrs.get("type", "")] = (_number(attrs, "count", line), _number(attrs, "size", line))
        else:
            self.sizes[f"{tag}:{attrs.get('type', '')}"] = _number(attrs, "size", line)

    def arena(self) -> ArenaInfo:
        if "system:current" not in self.sizes or "rest" not in self.totals:
            raise MalformedInput("malloc_info", f"heap {self.nr} lacks system or totals")
        system = self.sizes["system:current"]
        fast = self.totals.get("fast", (0, 0))
        return ArenaInfo(
            nr=self.nr, system=system, system_max=self.sizes.get("system:max", system),
            fast_count=fast[0], fast_bytes=fast[1],
            rest_count=self.totals["rest"][0], rest_bytes=self.totals["rest"][1],
            aspace_total=self.sizes.get("aspace:total", system),
            aspace_mprotect=self.sizes.get("aspace:mprotect", system),
            subheaps=self.sizes.get("aspace:subheaps", 0), bins=self.bins, unsorted=self.unsorted,
        )


_TAGS = ("size", "unsorted", "total", "system", "aspace")


def parse_malloc_info(xml_text: str, bins: bool = True) -> MallocInfo:
    """Parse the XML written by glibc's ``malloc_info(0, fp)``.

    glibc writes one element per line in a fixed order, so this reads it line
    by line (several times faster than an XML parser, and nothing to import);
    anything it does not expect is malformed input. ``bins=False`` skips the
    free-chunk size histogram (most of the lines) when only totals are needed.
    """
    lines = [line.strip() for line in xml_text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("<malloc version=") or lines[-1] != "</malloc>":
        raise MalformedInput("malloc_info", "not a <malloc version=...> document")
    document, heap = _Block(-1), None
    arenas: list[ArenaInfo] = []
    for line in lines[1:-1]:
        if line.startswith("<heap nr="):
            if heap is not None:
                raise MalformedInput("malloc_info", "<heap> inside <heap>")
            nr = line[len('<heap nr="'):].rstrip('">')
            if not (nr.isascii() and nr.isdigit()) or not line.endswith('">'):
                raise MalformedInput("malloc_info", f"bad {line[:40]!r}")
            heap = _Block(int(nr))
        elif line == "</heap>":
            if heap is None:
                raise MalformedInput("malloc_info", "</heap> without <heap>")
            arenas.append(heap.arena())
            heap = None
        elif line in ("<sizes>", "</sizes>", "<sizes/>") or (not bins and line.startswith(("<size ", "<unsorted "))):
            continue
        else:
            tag = line[1:].split(" ", 1)[0]
            if not line.startswith("<") or tag not in _TAGS:
                raise MalformedInput("malloc_info", f"unexpected {line[:40]!r}")
            (heap or document).add(tag, line)
    if heap is not None or not arenas:
        raise MalformedInput("malloc_info", "no complete <heap> element")
    return MallocInfo(
        arenas=arenas,
        mmap_count=document.totals.get("mmap", (0, 0))[0],
        mmap_bytes=document.totals.get("mmap", (0, 0))[1],
        system=document.sizes.get("system:current", sum(a.system for a in arenas)),
        system_max=document.sizes.get("system:max", 0),
    )


_ARENA_TOTALS = re.compile(r'<heap nr="(\d+)">.*?<total type="fast" count="\d+" size="(\d+)"/>\s*'
                           r'<total type="rest" count="\d+" size="(\d+)"/>\s*<system type="current" size="(\d+)"/>',
                           re.S)


def arena_totals(xml_text: str) -> list[tuple[int, int, int]]:
    """(nr, bytes in use, bytes free) of each arena in malloc_info's XML, by one regular expression:
    what parse_malloc_info gives as ArenaInfo.in_use and .free, five times faster, for a reading
    taken twice a test (the pytest plugin). MalformedInput where a <heap> lacks its totals."""
    found = [(int(nr), int(system) - int(fast) - int(rest), int(fast) + int(rest))
             for nr, fast, rest, system in _ARENA_TOTALS.findall(xml_text)]
    if not found or len(found) != xml_text.count("<heap nr="):
        raise MalformedInput("malloc_info", "a <heap> without its fast, rest and system totals")
    return found


class GlibcMalloc:
    """ctypes access to glibc's malloc introspection in this process."""

    def __init__(self) -> None:
        # The soname, not ctypes.util.find_library: that imports subprocess and
        # more into the observed process, and glibc's soname is fixed.
        try:
            self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError as exc:
            raise Unsupported(f"cannot load the C library ({exc})") from None
        for sym in ("mallinfo2", "malloc_info", "malloc_trim", "open_memstream"):
            if not hasattr(self.libc, sym):
                raise Unsupported(f"the C library has no {sym}(): not glibc >= 2.33")
        self.libc.mallinfo2.restype = _Mallinfo2Struct
        self.libc.malloc_trim.argtypes = [ctypes.c_size_t]
        self.libc.malloc_trim.restype = ctypes.c_int
        self.libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        self.libc.open_memstream.restype = ctypes.c_void_p
        self.libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        self.libc.fclose.argtypes = [ctypes.c_void_p]
        # open_memstream's buffer comes from whatever malloc the process runs
        # (jemalloc when preloaded): free it through the same symbol lookup,
        # never libc.so.6's own free, which would abort the process.
        self.free = ctypes.CDLL(None).free
        self.free.argtypes = [ctypes.c_void_p]

    def mallinfo2(self) -> Mallinfo2:
        s = self.libc.mallinfo2()
        return Mallinfo2(*(getattr(s, name) for name, _ in s._fields_))

    def capture_to_memory(self, write: Callable[[int], object]) -> str:
        """Run ``write(FILE*)`` into an in-memory stream and return its text."""
        buf, size = ctypes.c_void_p(), ctypes.c_size_t()
        fp = self.libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        if not fp:
            raise Unsupported("open_memstream failed")
        try:
            write(fp)
        finally:
            self.libc.fclose(fp)
        try:
            return ctypes.string_at(buf, size.value).decode("utf-8", "replace")
        finally:
            self.free(buf)

    def malloc_info_xml(self) -> str:
        return self.capture_to_memory(lambda fp: self.libc.malloc_info(0, fp))

    def malloc_info(self, bins: bool = True) -> MallocInfo:
        return parse_malloc_info(self.malloc_info_xml(), bins)

    def trim(self, pad: int = 0) -> bool:
        """``malloc_trim(pad)``; True when glibc says it released something."""
        return bool(self.libc.malloc_trim(pad))


@functools.cache
def glibc_malloc() -> GlibcMalloc:
    """The process-wide GlibcMalloc (raises Unsupported off glibc)."""
    return GlibcMalloc()
