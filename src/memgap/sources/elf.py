"""An ELF file's symbols and dynamic section: what tells which allocators a process carries.

``parse_elf`` reads the symbol tables (``.dynsym``, and ``.symtab`` when the file
is not stripped), ``DT_NEEDED`` and ``DT_SONAME`` through a ``read(offset, size)``
callable, so the parsing is tested on plain bytes; ``read_elf`` supplies that
callable over an open file (only the sections needed are read, not the whole
file) and caches the result per (path, device, inode, mtime, size): ``top``
asks again every refresh. Both classes (32/64-bit) and both byte orders.

A malformed file raises ``MalformedInput`` (never ``struct.error`` or an
``IndexError``): a file in /proc/PID/maps may be anything.

A non-PIE program that takes ``malloc``'s address gets a canonical PLT entry:
``dlsym`` and ``dladdr`` then name the program itself, although the function
it jumps to is libc's. The program's ``.dynsym`` says which it is: an imported
symbol has section index 0 (SHN_UNDEF).
"""
from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from memgap.errors import MalformedInput, Unsupported

SHT_SYMTAB, SHT_STRTAB, SHT_DYNAMIC, SHT_DYNSYM = 2, 3, 6, 11
SHN_UNDEF, SHN_XINDEX = 0, 0xFFFF
STB_LOCAL = 0
DT_NULL, DT_NEEDED, DT_SONAME = 0, 1, 14
MAX_SECTIONS = 1 << 16
MAX_TABLE = 512 << 20   # one symbol or string table; larger is a damaged header, not a real file

Read = Callable[[int, int], bytes]


@dataclass(frozen=True)
class ElfInfo:
    """What one ELF file says of its symbols and its dependencies."""

    exported: frozenset[str]   # defined GLOBAL/WEAK symbols of .dynsym: what the dynamic linker can bind to
    imported: frozenset[str]   # undefined in .dynsym: bound to another object at run time
    defined: frozenset[str]    # every defined symbol, .symtab's (local ones too) with .dynsym's
    needed: tuple[str, ...]    # DT_NEEDED, in order
    soname: str                # DT_SONAME, "" if none
    dynamic: bool              # has a dynamic section: loaded by ld.so (a static program has none)
    has_symtab: bool           # .symtab present (not stripped)
    sections: dict[str, tuple[int, int]]  # section name -> (file offset, size), for reading their bytes


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


def parse_elf(read: Read, size: int) -> ElfInfo:
    """Parse an ELF file of ``size`` bytes that ``read(offset, length)`` returns pieces of."""
    lay = _layout(_read(read, size, 0, 16, "identification"))
    header = _unpack(lay.order + lay.header, _read(read, size, 16, struct.calcsize(lay.order + lay.header), "header"),
                     0, "header")
    shoff, shentsize, shnum, shstrndx = header[5], header[10], header[11], header[12]
    if not shoff:  # section headers stripped (sstrip): nothing to read symbols from
        return ElfInfo(frozenset(), frozenset(), frozenset(), (), "", False, False, {})
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
    # (name, type, offset, size, link, entsize), whichever the class
    sections = []
    for i in range(shnum):
        s = _unpack(fmt, table, i * shentsize, "section header")
        sections.append((s[0], s[1], s[4], s[5], s[6], s[9]))

    def data_of(index: int, what: str) -> bytes:
        if not 0 <= index < shnum:
            raise MalformedInput("ELF file", f"{what}: section {index} of {shnum}")
        _n, _t, offset, length, _l, _e = sections[index]
        return _read(read, size, offset, length, what)

    names = data_of(shstrndx, "section names") if 0 < shstrndx < shnum else b""
    exported: set[str] = set()
    imported: set[str] = set()
    defined: set[str] = set()
    needed: list[str] = []
    soname = ""
    dynamic = False
    for _name, kind, offset, length, link, entsize in sections:
        if kind in (SHT_DYNSYM, SHT_SYMTAB):
            strings = data_of(link, "symbol names")
            symbols = _read(read, size, offset, length, "symbol table")
            for sym_name, defines, local in _symbols(lay, symbols, entsize, strings):
                if defines:
                    defined.add(sym_name)
                    if kind == SHT_DYNSYM and not local:
                        exported.add(sym_name)
                elif kind == SHT_DYNSYM:
                    imported.add(sym_name)
        elif kind == SHT_DYNAMIC:
            dynamic = True
            strings = data_of(link, "dynamic strings")
            for tag, value in _dynamic(lay, _read(read, size, offset, length, "dynamic section"), entsize):
                if tag == DT_NEEDED:
                    needed.append(_string(strings, value))
                elif tag == DT_SONAME:
                    soname = _string(strings, value)
    has_symtab = any(s[1] == SHT_SYMTAB for s in sections)
    named = {_string(names, s[0]): (s[2], s[3]) for s in sections if names}
    return ElfInfo(frozenset(exported), frozenset(imported), frozenset(defined), tuple(needed), soname,
                   dynamic, has_symtab, named)


def _symbols(lay: _Layout, data: bytes, entsize: int, strings: bytes) -> Iterator[tuple[str, bool, bool]]:
    """(name, defined, local) of each named symbol; the version suffix (``@GLIBC_2.2.5``) left off."""
    if entsize < lay.symbol_size:
        raise MalformedInput("ELF file", f"symbol entry size {entsize}")
    fmt = lay.order + lay.symbol
    for pos in range(0, len(data) - entsize + 1, entsize):
        fields = struct.unpack_from(fmt, data, pos)
        if lay.is64:
            st_name, st_info, _other, st_shndx = fields[:4]
        else:
            st_name, st_info, st_shndx = fields[0], fields[3], fields[5]
        name = _string(strings, st_name).partition("@")[0]
        if name:
            yield name, st_shndx != SHN_UNDEF, st_info >> 4 == STB_LOCAL


def _dynamic(lay: _Layout, data: bytes, entsize: int) -> Iterator[tuple[int, int]]:
    """(tag, value) of each dynamic entry up to DT_NULL."""
    step = max(entsize, struct.calcsize(lay.order + lay.dyn))
    for pos in range(0, len(data) - step + 1, step):
        tag, value = struct.unpack_from(lay.order + lay.dyn, data, pos)
        if tag == DT_NULL:
            return
        yield tag, value


def parse_elf_bytes(data: bytes) -> ElfInfo:
    """``parse_elf`` over a whole file's bytes."""
    return parse_elf(lambda offset, length: data[offset:offset + length], len(data))


# by the file's identity, not its path: one library seen through /proc/PID/root of each process of
# a tree (nine workers of one server) is one file, parsed once
_FILES: dict[tuple[int, int, int, int], ElfInfo | MalformedInput] = {}
_FILES_KEPT = 2048


def _read_elf_file(path: str) -> ElfInfo | MalformedInput:
    with open(path, "rb") as fh:
        fd = fh.fileno()
        try:
            return parse_elf(lambda offset, length: os.pread(fd, length, offset), os.fstat(fd).st_size)
        except MalformedInput as exc:  # cached too: a damaged file stays damaged until it changes
            return exc


def read_elf(path: str) -> ElfInfo:
    """The ELF facts of the file at ``path``, read once per version of the file.

    Raises OSError if it cannot be read, ``MalformedInput`` if it is no ELF file or a damaged one.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):  # a device or FIFO could block or have side effects when read
        raise MalformedInput("ELF file", f"{path}: not a regular file")
    identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    result = _FILES.get(identity)
    if result is None:
        result = _read_elf_file(path)
        if len(_FILES) >= _FILES_KEPT:
            _FILES.pop(next(iter(_FILES)))  # the first read goes first
        _FILES[identity] = result
    if isinstance(result, MalformedInput):
        raise MalformedInput("ELF file", f"{path}: {str(result).removeprefix('malformed ELF file: ')}")
    return result


def forget_elf_files() -> None:
    """Empty the cache of files read (a process that reads them once needs not keep them)."""
    _FILES.clear()


def read_section(path: str, info: ElfInfo, name: str, limit: int = 64 << 20) -> bytes:
    """The bytes of section ``name`` of the file ``info`` was read from (b"" if it has none), at most ``limit``."""
    offset, size = info.sections.get(name, (0, 0))
    with open(path, "rb") as fh:
        return os.pread(fh.fileno(), min(size, limit), offset) if size else b""


def parse_defines(data: bytes, name: bytes) -> bool | None:
    """What ``data`` (an ELF file's bytes) says of ``name``: defined, imported, or None (not said)."""
    try:
        info = parse_elf_bytes(data)
    except MalformedInput:
        return None
    symbol = name.decode("utf-8", "replace")
    if symbol in info.exported:
        return True
    return False if symbol in info.imported else None


def defines_symbol(path: str, name: str) -> bool | None:
    """True if ``path``'s dynamic symbols define ``name``, False if they import it, None if unknown."""
    try:
        info = read_elf(path)
    except (OSError, MalformedInput):
        return None
    if name in info.exported:
        return True
    return False if name in info.imported else None


def require_callable(allocator: str, library: str, names: tuple[str, ...], prefixed: bool, root: str = "") -> None:
    """Unsupported, in one line, unless ``library`` defines every function of ``names`` under
    those names: gdb finds a function by .dynsym or .symtab, and a stripped program that links
    the allocator in keeps neither (nor can memgap guess a prefix it renamed them with)."""
    try:
        defined = read_elf(root + library).defined
    except (OSError, MalformedInput) as exc:
        raise Unsupported(f"cannot read {allocator}'s object {library} to find its {names[0]} ({exc})") from None
    missing = [name for name in names if name not in defined]
    if missing or prefixed:
        raise Unsupported(f"{allocator} in {os.path.basename(library)} defines no {' or '.join(missing) or names[0]} "
                          "symbol (stripped, or renamed): memgap cannot call it")
