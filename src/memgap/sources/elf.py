"""An ELF file's symbols and dynamic section: what tells which allocators a process carries.

``parse_elf`` reads the section headers, ``DT_NEEDED`` and ``DT_SONAME``, and of the symbol tables
(``.dynsym``, and ``.symtab`` when the file is not stripped) and of ``.rodata`` only what a
``SymbolQuery`` asks about (memgap.sources.elf_symbols: a C++ library's 100,000 symbols are never
decoded one by one), through a ``read(offset, size)`` callable, so the parsing is tested on plain
bytes. ``read_elf`` supplies that callable over an open file (only the sections needed are read,
not the whole file) and keeps what it read per version of the file (device, inode, size, mtime,
ctime) and question: in memory (``top`` asks again every refresh, the workers of a tree map the
same libraries) and on disk between memgap's runs (memgap.sources.elf_cache). Both classes
(32/64-bit) and both byte orders.

A malformed file raises ``MalformedInput`` (never ``struct.error`` or an ``IndexError``): a file in
/proc/PID/maps may be anything.

A non-PIE program that takes ``malloc``'s address gets a canonical PLT entry: ``dlsym`` and
``dladdr`` then name the program itself, although the function it jumps to is libc's. The
program's ``.dynsym`` says which it is: an imported symbol has section index 0 (SHN_UNDEF).
"""
from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from memgap.errors import MalformedInput, Unsupported
from memgap.sources import elf_cache
from memgap.sources.elf_symbols import (
    SymbolQuery as SymbolQuery,  # re-exported: every caller asks with one
    entries_named,
    name_starts,
    rodata_anchors,
    strings_in,
)

SHT_SYMTAB, SHT_STRTAB, SHT_DYNAMIC, SHT_DYNSYM = 2, 3, 6, 11
SHN_UNDEF, SHN_XINDEX = 0, 0xFFFF
STB_LOCAL = 0
DT_NULL, DT_NEEDED, DT_SONAME = 0, 1, 14
MAX_SECTIONS = 1 << 16
MAX_TABLE = 512 << 20   # one symbol or string table; larger is a damaged header, not a real file
RODATA_LIMIT = 64 << 20  # of .rodata, what is searched for the query's byte strings
RODATA_PIECE = 4 << 20   # read and searched at a time
NO_SYMBOLS = SymbolQuery()  # sections and dependencies only

Read = Callable[[int, int], bytes]
Section = tuple[int, int, int, int, int, int]  # name, type, offset, size, link, entsize: whichever the class


@dataclass(frozen=True)
class ElfInfo:
    """What one ELF file says of its symbols and its dependencies: of its symbols, those the
    ``SymbolQuery`` it was read with asks about, and only those."""

    exported: frozenset[str]   # defined GLOBAL/WEAK symbols of .dynsym: what the dynamic linker can bind to
    imported: frozenset[str]   # undefined in .dynsym: bound to another object at run time
    defined: frozenset[str]    # every defined symbol, .symtab's (local ones too) with .dynsym's
    needed: tuple[str, ...]    # DT_NEEDED, in order
    soname: str                # DT_SONAME, "" if none
    dynamic: bool              # has a dynamic section: loaded by ld.so (a static program has none)
    has_symtab: bool           # .symtab present (not stripped)
    sections: dict[str, tuple[int, int]]  # section name -> (file offset, size), for reading their bytes
    rodata_has: frozenset[bytes] = field(default_factory=frozenset)  # the query's byte strings in .rodata

    def facts(self) -> dict[str, Any]:
        """Its JSON form, as memgap.sources.elf_cache keeps it."""
        return {"exported": sorted(self.exported), "imported": sorted(self.imported), "defined": sorted(self.defined),
                "needed": list(self.needed), "soname": self.soname, "dynamic": self.dynamic,
                "has_symtab": self.has_symtab, "sections": {k: list(v) for k, v in self.sections.items()},
                "rodata_has": sorted(b.decode("latin-1") for b in self.rodata_has)}

    @classmethod
    def from_facts(cls, facts: dict[str, Any]) -> ElfInfo:
        """From ``facts()``'s form; ValueError where a field is missing or not of its type."""
        def strings(key: str) -> list[str]:
            value = facts.get(key)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key}: not a list of strings")
            return value

        sections = facts.get("sections")
        if (not isinstance(sections, dict) or not isinstance(facts.get("soname"), str)
                or not isinstance(facts.get("dynamic"), bool) or not isinstance(facts.get("has_symtab"), bool)
                or not all(isinstance(v, list) and len(v) == 2 and all(type(n) is int for n in v)
                           for v in sections.values())):
            raise ValueError("not an ELF file's facts")
        return cls(frozenset(strings("exported")), frozenset(strings("imported")), frozenset(strings("defined")),
                   tuple(strings("needed")), facts["soname"], facts["dynamic"], facts["has_symtab"],
                   {k: (v[0], v[1]) for k, v in sections.items()},
                   frozenset(s.encode("latin-1") for s in strings("rodata_has")))


@dataclass(frozen=True)
class _Layout:
    """Struct formats of one ELF class and byte order."""

    order: str
    header: str
    section: str
    symbol: str
    dyn: str
    is64: bool

    @property
    def symbol_size(self) -> int:
        return struct.calcsize(self.order + self.symbol)

    @property
    def section_size(self) -> int:
        return struct.calcsize(self.order + self.section)


_LAYOUTS = {
    1: ("HHIIIIIHHHHHH", "IIIIIIIIII", "IIIBBH", "iI", False),
    2: ("HHIQQQIHHHHHH", "IIQQQQIIQQ", "IBBHQQ", "qQ", True),
}


def _layout(ident: bytes) -> _Layout:
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise MalformedInput("ELF file", "no ELF magic")
    if ident[4] not in _LAYOUTS or ident[5] not in (1, 2):
        raise MalformedInput("ELF file", f"unknown class {ident[4]} or byte order {ident[5]}")
    header, section, symbol, dyn, is64 = _LAYOUTS[ident[4]]
    return _Layout("<" if ident[5] == 1 else ">", header, section, symbol, dyn, is64)


def _unpack(fmt: str, data: bytes, offset: int, what: str) -> tuple[Any, ...]:
    try:
        return struct.unpack_from(fmt, data, offset)
    except struct.error:
        raise MalformedInput("ELF file", f"{what} cut short") from None


def _read(read: Read, size: int, offset: int, length: int, what: str) -> bytes:
    if offset < 0 or length < 0 or offset + length > size or length > MAX_TABLE:
        raise MalformedInput("ELF file", f"{what} at {offset:#x}+{length:#x} lies outside the file ({size} bytes)")
    data = read(offset, length)
    if len(data) != length:
        raise MalformedInput("ELF file", f"{what} cut short")
    return data


def _string(table: bytes, offset: int) -> str:
    if offset >= len(table):
        return ""
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def parse_elf(read: Read, size: int, query: SymbolQuery) -> ElfInfo:
    """Parse an ELF file of ``size`` bytes that ``read(offset, length)`` returns pieces of: its sections
    and dependencies, and of its symbols and ``.rodata`` what ``query`` asks about."""
    lay, header = _head(read, size)
    if not header[5]:  # section headers stripped (sstrip): nothing to read symbols from
        return ElfInfo(frozenset(), frozenset(), frozenset(), (), "", False, False, {})
    sections, shstrndx = _sections(read, size, lay, header)
    contents: dict[int, bytes] = {}

    def data_of(index: int, what: str) -> bytes:
        if not 0 <= index < len(sections):
            raise MalformedInput("ELF file", f"{what}: section {index} of {len(sections)}")
        if index not in contents:  # .dynstr serves .dynsym and .dynamic: read once
            _n, _t, offset, length, _l, _e = sections[index]
            contents[index] = _read(read, size, offset, length, what)
        return contents[index]

    names = data_of(shstrndx, "section names") if 0 < shstrndx < len(sections) else b""
    symbols = _Symbols(lay, query)
    needed: list[str] = []
    soname = ""
    for _name, kind, offset, length, link, entsize in sections:
        if kind in (SHT_DYNSYM, SHT_SYMTAB) and query.asks_symbols:
            table = _read(read, size, offset, length, "symbol table")
            symbols.add(table, entsize, data_of(link, "symbol names"), kind == SHT_DYNSYM)
        elif kind == SHT_DYNAMIC:
            strings = data_of(link, "dynamic strings")
            for tag, value in _dynamic(lay, _read(read, size, offset, length, "dynamic section"), entsize):
                if tag == DT_NEEDED:
                    needed.append(_string(strings, value))
                elif tag == DT_SONAME:
                    soname = _string(strings, value)
    named = {_string(names, s[0]): (s[2], s[3]) for s in sections if names}
    return ElfInfo(frozenset(symbols.exported), frozenset(symbols.imported), frozenset(symbols.defined),
                   tuple(needed), soname, any(s[1] == SHT_DYNAMIC for s in sections),
                   any(s[1] == SHT_SYMTAB for s in sections), named, _in_rodata(read, size, named, query.rodata))


def _head(read: Read, size: int) -> tuple[_Layout, tuple[Any, ...]]:
    """The file's class and byte order, and its ELF header's fields."""
    lay = _layout(_read(read, size, 0, 16, "identification"))
    fmt = lay.order + lay.header
    return lay, _unpack(fmt, _read(read, size, 16, struct.calcsize(fmt), "header"), 0, "header")


def _sections(read: Read, size: int, lay: _Layout, header: tuple[Any, ...]) -> tuple[list[Section], int]:
    """Every section's header, and the index of the one holding their names."""
    shoff, shentsize, shnum, shstrndx = header[5], header[10], header[11], header[12]
    if shentsize < lay.section_size:
        raise MalformedInput("ELF file", f"section header size {shentsize}")
    fmt = lay.order + lay.section
    if shnum == 0 or shstrndx == SHN_XINDEX:  # extended numbering: the real values sit in section 0
        first = _unpack(fmt, _read(read, size, shoff, shentsize, "section 0"), 0, "section 0")
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == SHN_XINDEX else shstrndx
    if shnum > MAX_SECTIONS:
        raise MalformedInput("ELF file", f"{shnum} sections")
    table = _read(read, size, shoff, shnum * shentsize, "section headers")
    sections = []
    for i in range(shnum):
        s = _unpack(fmt, table, i * shentsize, "section header")
        sections.append((s[0], s[1], s[4], s[5], s[6], s[9]))
    return sections, shstrndx


class _Symbols:
    """The symbols a query asks about, gathered over the symbol tables of one file."""

    def __init__(self, lay: _Layout, query: SymbolQuery) -> None:
        self.lay, self.query = lay, query
        self.exported: set[str] = set()
        self.imported: set[str] = set()
        self.defined: set[str] = set()

    def add(self, table: bytes, entsize: int, strings: bytes, dynamic: bool) -> None:
        """The entries of one table (``.dynsym`` if ``dynamic``, else ``.symtab``) whose names the query
        asks about: found in the string table's bytes, and only those entries decoded."""
        lay = self.lay
        if entsize < lay.symbol_size:
            raise MalformedInput("ELF file", f"symbol entry size {entsize}")
        fmt = lay.order + lay.symbol
        for index in entries_named(table, entsize, lay.order == ">", name_starts(strings, self.query)):
            fields = struct.unpack_from(fmt, table, index * entsize)
            if lay.is64:
                st_name, st_info, _other, st_shndx = fields[:4]
            else:
                st_name, st_info, st_shndx = fields[0], fields[3], fields[5]
            name = _string(strings, st_name).partition("@")[0]  # the version suffix (@GLIBC_2.2.5) left off
            if not name or not self.query.wants(name):
                continue
            if st_shndx != SHN_UNDEF:
                self.defined.add(name)
                if dynamic and st_info >> 4 != STB_LOCAL:
                    self.exported.add(name)
            elif dynamic:
                self.imported.add(name)


def _in_rodata(read: Read, size: int, sections: dict[str, tuple[int, int]],
               wanted: tuple[bytes, ...]) -> frozenset[bytes]:
    """Which of ``wanted`` the file's ``.rodata`` holds (of it, what lies within the file, at most
    RODATA_LIMIT), read a piece at a time: a C++ library's is 30 MiB. Each piece is searched once per
    anchor the strings share (memgap.sources.elf_symbols.rodata_anchors), not once per string."""
    offset, length = sections.get(".rodata", (0, 0))
    length = min(length, size - offset, RODATA_LIMIT)
    if not wanted or length <= 0 or offset < 0:
        return frozenset()
    overlap = max(map(len, wanted)) - 1   # a string across two pieces is whole in the first
    anchors = rodata_anchors(wanted)
    found: set[bytes] = set()
    for start in range(0, length, RODATA_PIECE):
        data = read(offset + start, min(RODATA_PIECE + overlap, length - start))
        strings_in(data, anchors, found)
        if len(found) == len(set(wanted)):
            break
    return frozenset(found)


def search_size(path: str, query: SymbolQuery) -> int:
    """How many bytes ``parse_elf`` would search in the file at ``path`` for ``query``: its symbol tables'
    strings and (what is searched of) its ``.rodata``, from its section headers alone: what a read costs,
    for deciding whether to share reads out (memgap.sources.elf_ahead). OSError, MalformedInput as read_elf."""
    with open(path, "rb") as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size

        def read(offset: int, length: int) -> bytes:
            return os.pread(fd, length, offset)

        lay, header = _head(read, size)
        if not header[5]:
            return 0
        sections, shstrndx = _sections(read, size, lay, header)
        names = b""
        if query.rodata and 0 < shstrndx < len(sections):
            _n, _t, offset, length, _l, _e = sections[shstrndx]
            names = _read(read, size, offset, length, "section names")
    total = 0
    if query.asks_symbols:
        links = {link for _n, kind, _o, _l, link, _e in sections if kind in (SHT_DYNSYM, SHT_SYMTAB)}
        total += sum(sections[i][3] for i in links if 0 <= i < len(sections))
    rodata = [s for s in sections if names and _string(names, s[0]) == ".rodata"]
    if rodata:
        total += max(0, min(rodata[0][3], size - rodata[0][2], RODATA_LIMIT))
    return total


def _dynamic(lay: _Layout, data: bytes, entsize: int) -> Iterator[tuple[int, int]]:
    """(tag, value) of each dynamic entry up to DT_NULL."""
    step = max(entsize, struct.calcsize(lay.order + lay.dyn))
    for pos in range(0, len(data) - step + 1, step):
        tag, value = struct.unpack_from(lay.order + lay.dyn, data, pos)
        if tag == DT_NULL:
            return
        yield tag, value


def parse_elf_bytes(data: bytes, query: SymbolQuery) -> ElfInfo:
    """``parse_elf`` over a whole file's bytes."""
    return parse_elf(lambda offset, length: data[offset:offset + length], len(data), query)


# by the file's identity, not its path: one library seen through /proc/PID/root of each process of
# a tree (nine workers of one server) is one file, parsed once
_FILES: dict[tuple[elf_cache.Identity, SymbolQuery], ElfInfo | MalformedInput] = {}
_FILES_KEPT = 2048


def _read_elf_file(path: str, identity: elf_cache.Identity,
                   query: SymbolQuery) -> tuple[ElfInfo | MalformedInput, bool]:
    """The file parsed, and whether it stayed the version ``identity`` names while it was read (then
    what it says is kept, in memory and on disk for the next run)."""
    with open(path, "rb") as fh:
        fd = fh.fileno()
        before = elf_cache.file_identity(os.fstat(fd))
        try:
            result: ElfInfo | MalformedInput = parse_elf(lambda offset, length: os.pread(fd, length, offset),
                                                         before[2], query)
        except MalformedInput as exc:  # kept too: a damaged file stays damaged until it changes
            result = exc
        steady = before == identity == elf_cache.file_identity(os.fstat(fd))
    if steady:
        elf_cache.store(identity, query.fingerprint, result.facts() if isinstance(result, ElfInfo)
                        else {"malformed": str(result).removeprefix("malformed ELF file: ")})
    return result, steady


def _kept(identity: elf_cache.Identity, query: SymbolQuery) -> ElfInfo | MalformedInput | None:
    """What an earlier run read of this version of the file for this question, or None."""
    facts = elf_cache.load(identity, query.fingerprint)
    if facts is None:
        return None
    if isinstance(facts.get("malformed"), str):
        return MalformedInput("ELF file", facts["malformed"])
    try:
        return ElfInfo.from_facts(facts)
    except ValueError:
        return None  # not what this version writes: read the file, and keep what it says


def kept(path: str, query: SymbolQuery) -> bool:
    """Whether what ``query`` asks of this version of the file at ``path`` is kept (in memory, or on disk
    from an earlier run: then it is loaded into memory now). OSError if it cannot be looked at."""
    identity = elf_cache.file_identity(os.stat(path))
    if (identity, query) in _FILES:
        return True
    result = _kept(identity, query)
    if result is not None:
        _remember(identity, query, result)
    return result is not None


def _remember(identity: elf_cache.Identity, query: SymbolQuery, result: ElfInfo | MalformedInput) -> None:
    if len(_FILES) >= _FILES_KEPT:
        _FILES.pop(next(iter(_FILES)))  # the first read goes first
    _FILES[identity, query] = result


def read_elf(path: str, query: SymbolQuery) -> ElfInfo:
    """The ELF facts of the file at ``path`` that ``query`` asks about, read once per version of the
    file (in this process, and between memgap's runs: memgap.sources.elf_cache).

    Raises OSError if it cannot be read, ``MalformedInput`` if it is no ELF file or a damaged one.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):  # a device or FIFO could block or have side effects when read
        raise MalformedInput("ELF file", f"{path}: not a regular file")
    identity = elf_cache.file_identity(st)
    result = _FILES.get((identity, query)) or _kept(identity, query)
    steady = True
    if result is None:
        result, steady = _read_elf_file(path, identity, query)
    if steady and (identity, query) not in _FILES:
        _remember(identity, query, result)
    if isinstance(result, MalformedInput):
        raise MalformedInput("ELF file", f"{path}: {str(result).removeprefix('malformed ELF file: ')}")
    return result


def forget_elf_files() -> None:
    """Empty the cache of files read in this process (one that reads them once needs not keep them)."""
    _FILES.clear()


def read_section(path: str, info: ElfInfo, name: str, limit: int = 64 << 20) -> bytes:
    """The bytes of section ``name`` of the file ``info`` was read from (b"" if it has none), at most ``limit``."""
    offset, size = info.sections.get(name, (0, 0))
    with open(path, "rb") as fh:
        return os.pread(fh.fileno(), min(size, limit), offset) if size else b""


def parse_defines(data: bytes, name: bytes) -> bool | None:
    """What ``data`` (an ELF file's bytes) says of ``name``: defined, imported, or None (not said)."""
    symbol = name.decode("utf-8", "replace")
    try:
        info = parse_elf_bytes(data, SymbolQuery(names=frozenset({symbol})))
    except (MalformedInput, ValueError):  # ValueError: a name no symbol can have (NUL, @)
        return None
    if symbol in info.exported:
        return True
    return False if symbol in info.imported else None


def defines_symbol(path: str, name: str) -> bool | None:
    """True if ``path``'s dynamic symbols define ``name``, False if they import it, None if unknown."""
    try:
        info = read_elf(path, SymbolQuery(names=frozenset({name})))
    except (OSError, MalformedInput):
        return None
    if name in info.exported:
        return True
    return False if name in info.imported else None


def require_callable(allocator: str, library: str, names: tuple[str, ...], prefixed: bool, query: SymbolQuery,
                     root: str = "") -> None:
    """Unsupported, in one line, unless ``library`` defines every function of ``names`` under
    those names: gdb finds a function by .dynsym or .symtab, and a stripped program that links
    the allocator in keeps neither (nor can memgap guess a prefix it renamed them with). ``query``
    is the one detection read the library with (it asks about ``names``): nothing is read again."""
    if not all(query.wants(name) for name in names):
        raise ValueError(f"the query does not ask about {names}")
    try:
        defined = read_elf(root + library, query).defined
    except (OSError, MalformedInput) as exc:
        raise Unsupported(f"cannot read {allocator}'s object {library} to find its {names[0]} ({exc})") from None
    missing = [name for name in names if name not in defined]
    if missing or prefixed:
        raise Unsupported(f"{allocator} in {os.path.basename(library)} defines no {' or '.join(missing) or names[0]} "
                          "symbol (stripped, or renamed): memgap cannot call it")
