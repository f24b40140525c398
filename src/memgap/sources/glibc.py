"""glibc malloc: mallinfo2, malloc_info XML and malloc_trim, in this process.

The XML parser is pure; the ctypes calls are thin and only run where glibc's
malloc is the process's allocator (the caller checks that first).
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field

from ..errors import MalformedInput, Unsupported


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


_ROOT = re.compile(r"\A\s*<malloc version=\"\d+\">\s*(.*?)</malloc>\s*\Z", re.S)
_HEAP = re.compile(r"<heap nr=\"([^\"]*)\">(.*?)</heap>", re.S)
_ELEMENT = re.compile(r"<(\w+)((?:\s+\w+=\"[^\"<>]*\")*)\s*/>")
_ATTR = re.compile(r"(\w+)=\"([^\"]*)\"")
_SIZES = re.compile(r"<sizes>(.*?)</sizes>|<sizes/>", re.S)


def _number(raw: str, what: str) -> int:
    if not raw.isdigit():
        raise MalformedInput("malloc_info", f"{what}={raw!r} is not a number")
    return int(raw)


def _elements(text: str, where: str) -> list[tuple[str, dict[str, str]]]:
    """The empty elements of ``text``; anything else left over is malformed."""
    out = [(m.group(1), dict(_ATTR.findall(m.group(2)))) for m in _ELEMENT.finditer(text)]
    if _ELEMENT.sub("", text).strip():
        raise MalformedInput("malloc_info", f"unexpected content in {where}")
    return out


def _collect(elements: list[tuple[str, dict[str, str]]], where: str) -> tuple[dict, dict]:
    """(totals by type -> (count, size), system/aspace sizes by 'tag:type')."""
    totals, sizes = {}, {}
    for tag, attrs in elements:
        try:
            if tag == "total":
                totals[attrs["type"]] = (_number(attrs["count"], "count"), _number(attrs["size"], "size"))
            elif tag in ("system", "aspace"):
                sizes[f"{tag}:{attrs['type']}"] = _number(attrs["size"], "size")
        except KeyError as exc:
            raise MalformedInput("malloc_info", f"<{tag}> in {where} lacks {exc.args[0]}") from None
    return totals, sizes


def parse_malloc_info(xml_text: str) -> MallocInfo:
    """Parse the XML written by glibc's ``malloc_info(0, fp)`` (a fixed, flat format)."""
    root = _ROOT.match(xml_text)
    if root is None:
        raise MalformedInput("malloc_info", "not a <malloc version=...> document")
    body = root.group(1)
    arenas = []
    for heap in _HEAP.finditer(body):
        where = f"heap {heap.group(1)}"
        inner = heap.group(2)
        bins, unsorted = [], None
        sizes_block = _SIZES.search(inner)
        if sizes_block is not None:
            for tag, attrs in _elements(sizes_block.group(1) or "", where):
                try:
                    entry = tuple(_number(attrs[k], k) for k in ("from", "to", "total", "count"))
                except KeyError as exc:
                    raise MalformedInput("malloc_info", f"<{tag}> in {where} lacks {exc.args[0]}") from None
                if tag == "unsorted":
                    unsorted = entry
                elif tag == "size":
                    bins.append(entry)
                else:
                    raise MalformedInput("malloc_info", f"<{tag}> inside <sizes> of {where}")
            inner = inner[: sizes_block.start()] + inner[sizes_block.end():]
        totals, sizes = _collect(_elements(inner, where), where)
        if "system:current" not in sizes or "rest" not in totals:
            raise MalformedInput("malloc_info", f"{where} lacks system or totals")
        system = sizes["system:current"]
        arenas.append(ArenaInfo(
            nr=_number(heap.group(1), "nr"),
            system=system,
            system_max=sizes.get("system:max", system),
            fast_count=totals.get("fast", (0, 0))[0],
            fast_bytes=totals.get("fast", (0, 0))[1],
            rest_count=totals["rest"][0],
            rest_bytes=totals["rest"][1],
            aspace_total=sizes.get("aspace:total", system),
            aspace_mprotect=sizes.get("aspace:mprotect", system),
            subheaps=sizes.get("aspace:subheaps", 0),
            bins=bins,  # type: ignore[arg-type]
            unsorted=unsorted,  # type: ignore[arg-type]
        ))
    if not arenas:
        raise MalformedInput("malloc_info", "no <heap> element")
    totals, sizes = _collect(_elements(_HEAP.sub("", body), "<malloc>"), "<malloc>")
    return MallocInfo(
        arenas=arenas,
        mmap_count=totals.get("mmap", (0, 0))[0],
        mmap_bytes=totals.get("mmap", (0, 0))[1],
        system=sizes.get("system:current", sum(a.system for a in arenas)),
        system_max=sizes.get("system:max", 0),
    )


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

    def capture_to_memory(self, write) -> str:  # type: ignore[no-untyped-def]
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

    def malloc_info(self) -> MallocInfo:
        return parse_malloc_info(self.malloc_info_xml())

    def trim(self, pad: int = 0) -> bool:
        """``malloc_trim(pad)``; True when glibc says it released something."""
        return bool(self.libc.malloc_trim(pad))


_glibc: GlibcMalloc | None = None


def glibc_malloc() -> GlibcMalloc:
    """The process-wide GlibcMalloc (raises Unsupported off glibc)."""
    global _glibc
    if _glibc is None:
        _glibc = GlibcMalloc()
    return _glibc
