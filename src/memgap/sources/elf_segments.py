"""An ELF file's loadable segments (its PT_LOAD program headers): where a loaded object's static data lies.

The loader maps each PT_LOAD segment's first ``p_filesz`` bytes from the file and zero-fills the rest
up to ``p_memsz`` (the ``.bss``): the part beyond the last page of the file's bytes is an anonymous
mapping of its own (glibc's ``_dl_map_segments``), which /proc/PID/maps shows with no path.

``parse_segments`` reads the program headers through a ``read(offset, size)`` callable, so the parsing
is tested on plain bytes; ``read_segments`` supplies it over an open file (one pread of the ELF header,
one of the program headers) and keeps the result per file identity (device, inode, mtime, size): a
program header is small, kept in memory only. Both classes (32/64-bit) and both byte orders. A damaged
file raises ``MalformedInput``, never ``struct.error`` or an ``IndexError``.
"""
from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass

from memgap.errors import MalformedInput

PT_LOAD = 1
PN_XNUM = 0xFFFF          # e_phnum's escape: the real count is section 0's sh_info
MAX_SEGMENTS = 1 << 16

Read = Callable[[int, int], bytes]

# per class: the ELF header after e_ident, a program header, a section header (for PN_XNUM),
# and where in the program header p_type, p_offset, p_vaddr, p_filesz, p_memsz sit
_HEADER = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_PHDR = {1: "IIIIIIII", 2: "IIQQQQQQ"}
_SHDR = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
_PHDR_FIELDS = {1: (0, 1, 2, 4, 5), 2: (0, 2, 3, 5, 6)}


@dataclass(frozen=True)
class LoadSegment:
    """One PT_LOAD program header: file bytes [offset, offset + filesz) loaded at vaddr, memsz long."""

    offset: int
    vaddr: int
    filesz: int
    memsz: int


def _unpack(fmt: str, data: bytes, what: str) -> tuple[int, ...]:
    try:
        return struct.unpack_from(fmt, data)
    except struct.error:
        raise MalformedInput("ELF file", f"{what} cut short") from None


def _read(read: Read, size: int, offset: int, length: int, what: str) -> bytes:
    if offset < 0 or length < 0 or offset + length > size:
        raise MalformedInput("ELF file", f"{what} at {offset:#x}+{length:#x} lies outside the file ({size} bytes)")
    data = read(offset, length)
    if len(data) != length:
        raise MalformedInput("ELF file", f"{what} cut short")
    return data


def parse_segments(read: Read, size: int) -> tuple[LoadSegment, ...]:
    """The PT_LOAD segments of an ELF file of ``size`` bytes that ``read(offset, length)`` returns pieces
    of, in the file's order."""
    ident = _read(read, size, 0, 16, "identification")
    if ident[:4] != b"\x7fELF":
        raise MalformedInput("ELF file", "no ELF magic")
    cls, order = ident[4], {1: "<", 2: ">"}.get(ident[5])
    if cls not in _HEADER or order is None:
        raise MalformedInput("ELF file", f"unknown class {cls} or byte order {ident[5]}")
    header_fmt = order + _HEADER[cls]
    header = _unpack(header_fmt, _read(read, size, 16, struct.calcsize(header_fmt), "header"), "header")
    phoff, shoff, phentsize, phnum, shentsize = header[4], header[5], header[8], header[9], header[10]
    phdr_fmt = order + _PHDR[cls]
    if phnum == PN_XNUM:  # more program headers than e_phnum holds: section 0 says how many
        shdr_fmt = order + _SHDR[cls]
        if shentsize < struct.calcsize(shdr_fmt):
            raise MalformedInput("ELF file", f"section header size {shentsize}")
        phnum = _unpack(shdr_fmt, _read(read, size, shoff, shentsize, "section 0"), "section 0")[7]
    if not phnum or not phoff:
        return ()
    if phentsize < struct.calcsize(phdr_fmt) or phnum > MAX_SEGMENTS:
        raise MalformedInput("ELF file", f"{phnum} program headers of {phentsize} bytes")
    table = _read(read, size, phoff, phnum * phentsize, "program headers")
    kind, offset, vaddr, filesz, memsz = _PHDR_FIELDS[cls]
    out = []
    for i in range(phnum):
        p = _unpack(phdr_fmt, table[i * phentsize:(i + 1) * phentsize], "program header")
        if p[kind] != PT_LOAD:
            continue
        if p[filesz] > p[memsz]:
            raise MalformedInput("ELF file", f"a loadable segment of {p[filesz]:#x} file bytes in {p[memsz]:#x}")
        out.append(LoadSegment(p[offset], p[vaddr], p[filesz], p[memsz]))
    return tuple(out)


def parse_segments_bytes(data: bytes) -> tuple[LoadSegment, ...]:
    """``parse_segments`` over a whole file's bytes."""
    return parse_segments(lambda offset, length: data[offset:offset + length], len(data))


# by the file's identity: one library seen through /proc/PID/root of each process of a tree is read once
_FILES: dict[tuple[int, int, int, int], tuple[LoadSegment, ...] | MalformedInput] = {}
_FILES_KEPT = 4096


def read_segments(path: str) -> tuple[tuple[LoadSegment, ...], int]:
    """The PT_LOAD segments of the file at ``path``, read once per version of the file, with its inode
    (what tells it from another file at that path in /proc/PID/maps).

    Raises OSError if it cannot be read, ``MalformedInput`` if it is no ELF file or a damaged one.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):  # a device or FIFO could block or have side effects when read
        raise MalformedInput("ELF file", f"{path}: not a regular file")
    identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    result = _FILES.get(identity)
    if result is None:
        with open(path, "rb") as fh:
            fd = fh.fileno()
            try:
                result = parse_segments(lambda offset, length: os.pread(fd, length, offset), st.st_size)
            except MalformedInput as exc:  # kept too: a damaged file stays damaged until it changes
                result = exc
        if len(_FILES) >= _FILES_KEPT:
            _FILES.pop(next(iter(_FILES)))
        _FILES[identity] = result
    if isinstance(result, MalformedInput):
        raise MalformedInput("ELF file", f"{path}: {str(result).removeprefix('malformed ELF file: ')}")
    return result, st.st_ino
