"""What a Go program's file says of itself: its build info, its runtime's symbols, its DWARF.

- ``parse_buildinfo``: the ``.go.buildinfo`` blob (magic ``"\\xff Go buildinf:"``, Go 1.18's inline
  format: the Go version and the module info with its ``build`` settings, GOARCH, GOEXPERIMENT,
  DefaultGODEBUG...). It stays in a program stripped with ``-ldflags='-s -w'``.
- ``parse_symbols``: the values of named symbols of ``.symtab`` (``runtime.mheap_`` and friends),
  present unless the program was built with ``-s``.
- ``section_bytes``: a debug section, decompressed (Go compresses its DWARF: ``SHF_COMPRESSED``
  sections with an ``Elf64_Chdr`` since Go 1.16 or so, ``.zdebug_*`` with a ``ZLIB`` header before).
- ``read_go_binary``: all of it for one file, cached by the file's identity (a program read
  every refresh is parsed once); the DWARF types parsed on first need, cached per Go build id.

64-bit little-endian ELF only (linux/amd64, linux/arm64): the Go reader reads no other.
"""
from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from memgap.errors import MalformedInput
from memgap.sources.elf import NO_SYMBOLS, read_elf, read_section

if TYPE_CHECKING:  # the DWARF reader only where a Go program's heap is read: every look asks whether it is Go
    from memgap.runtimes.go_dwarf import DwarfTypes

MAGIC = b"\xff Go buildinf:"
FLAG_INLINE_STRINGS = 2
RUNTIME_SYMBOLS = ("runtime.mheap_", "runtime.memstats", "runtime.buildVersion")
RUNTIME_UNITS = frozenset({"runtime", "internal/runtime/gc"})   # the units the reader needs (types: "runtime")
SCAN_LIMIT = 256 << 20      # a program without section headers: its first bytes searched for the magic
ELFCOMPRESS_ZLIB = 1
ET_DYN, PT_LOAD = 3, 1


@dataclass(frozen=True)
class BuildInfo:
    """The program's build info: its Go version, main module, and build settings."""

    version: str                              # "go1.26.8"
    path: str = ""                            # the main package's path
    settings: dict[str, str] = field(default_factory=dict)   # "GOARCH": "amd64", "-ldflags": "-s -w", ...


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise MalformedInput("Go build info", "bad varint")


def parse_buildinfo(blob: bytes) -> BuildInfo | None:
    """The build info in ``blob`` (from the magic on), None where it holds none. Only Go 1.18's inline
    format is read: older programs point at their strings, and the version then comes from the runtime."""
    start = blob.find(MAGIC)
    if start < 0 or len(blob) < start + 32:
        return None
    if not blob[start + 15] & FLAG_INLINE_STRINGS:
        return BuildInfo("")
    pos = start + 32
    size, pos = _uvarint(blob, pos)
    version = blob[pos:pos + size].decode("utf-8", "replace")
    pos += size
    size, pos = _uvarint(blob, pos)
    mod = blob[pos:pos + size]
    if len(mod) >= 33 and mod[-17:-16] == b"\n":   # 16-byte sentinels around the module info
        mod = mod[16:-16]
    settings, path = {}, ""
    for line in mod.decode("utf-8", "replace").splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "path":
            path = rest
        elif kind == "build":
            key, _, value = rest.partition("=")
            settings[key] = value.strip('"')
    if not version.startswith("go"):
        raise MalformedInput("Go build info", f"version {version[:40]!r}")
    return BuildInfo(version, path, settings)


def parse_symbols(symtab: bytes, strtab: bytes, wanted: frozenset[str]) -> dict[str, tuple[int, int]]:
    """(value, size) of each symbol of ``wanted`` in an ELF64 little-endian ``.symtab``."""
    found: dict[str, tuple[int, int]] = {}
    encoded = {name.encode(): name for name in wanted}
    for pos in range(0, len(symtab) - 23, 24):
        st_name, _info, _other, _shndx, value, size = struct.unpack_from("<IBBHQQ", symtab, pos)
        end = strtab.find(b"\0", st_name)
        name = encoded.get(strtab[st_name:end] if 0 <= st_name < len(strtab) and end >= 0 else b"")
        if name is not None and value:
            found[name] = (value, size)
    return found


def decompress(name: str, data: bytes) -> bytes:
    """A debug section's contents: ``.zdebug_*`` (a "ZLIB" header and the size, big-endian) and
    ``SHF_COMPRESSED`` (an Elf64_Chdr: a DWARF unit begins with its length, never 1) inflated."""
    try:
        if name.startswith(".zdebug_") and data[:4] == b"ZLIB":
            return zlib.decompress(data[12:])
        if len(data) >= 24 and struct.unpack_from("<I", data)[0] == ELFCOMPRESS_ZLIB:
            out = zlib.decompress(data[24:])
            if len(out) != struct.unpack_from("<Q", data, 8)[0]:
                raise MalformedInput("DWARF", f"{name}: inflated size differs from its header's")
            return out
    except zlib.error as exc:
        raise MalformedInput("DWARF", f"{name}: {exc}") from None
    return data


@dataclass
class GoBinary:
    """One Go program file: build info, runtime symbols, whether it carries DWARF, its build id."""

    path: str
    build: BuildInfo | None
    symbols: dict[str, tuple[int, int]]
    has_dwarf: bool
    pie: bool
    build_id: str
    base_vaddr: int = 0        # the first PT_LOAD's address, page-aligned: a PIE is loaded this far below its maps
    _dwarf: DwarfTypes | None = None

    @property
    def version(self) -> str:
        return self.build.version if self.build is not None else ""

    @property
    def goarch(self) -> str:
        return self.build.settings.get("GOARCH", "") if self.build is not None else ""

    def dwarf(self, everything: bool = False) -> DwarfTypes:
        """The program's DWARF types (parsed once per build id): of the runtime's units only, or
        ``everything`` (where a release keeps what is needed elsewhere). MalformedInput where damaged."""
        key = (self.build_id, everything)
        if self._dwarf is None or everything:
            cached = _DWARF.get(key) if self.build_id else None
            if cached is None:
                from memgap.runtimes.go_dwarf import parse_dwarf

                info = read_elf(self.path, NO_SYMBOLS)
                names = [n for n in (".debug_info", ".zdebug_info") if n in info.sections]
                abbrevs = [n for n in (".debug_abbrev", ".zdebug_abbrev") if n in info.sections]
                if not names or not abbrevs:
                    raise MalformedInput("DWARF", f"{self.path}: no .debug_info")
                cached = parse_dwarf(decompress(names[0], read_section(self.path, info, names[0], 512 << 20)),
                                     decompress(abbrevs[0], read_section(self.path, info, abbrevs[0])),
                                     decompress(".debug_str", read_section(self.path, info, ".debug_str")),
                                     units=None if everything else RUNTIME_UNITS.__contains__)
                if self.build_id:
                    _DWARF[key] = cached
            if everything:
                return cached
            self._dwarf = cached
        return self._dwarf


_FILES: dict[tuple[int, int, int, int], GoBinary | None] = {}
_DWARF: dict[tuple[str, bool], DwarfTypes] = {}
_KEPT = 64


def _scan_for_buildinfo(path: str) -> bytes:
    """The bytes from the magic on, searched in a file with no section headers (16-byte aligned)."""
    with open(path, "rb") as fh:
        offset = 0
        while offset < SCAN_LIMIT:
            chunk = fh.read(1 << 20)
            at = chunk.find(MAGIC)
            while at >= 0 and (offset + at) % 16:
                at = chunk.find(MAGIC, at + 1)
            if at >= 0:
                return os.pread(fh.fileno(), 64 << 10, offset + at)
            if len(chunk) < 1 << 20:
                return b""
            offset += len(chunk) - len(MAGIC)
            fh.seek(offset)
    return b""


def _build_id(note: bytes) -> str:
    """The Go build id of a ``.note.go.buildid`` note (name "Go", type 4)."""
    if len(note) < 16:
        return ""
    namesz, descsz, kind = struct.unpack_from("<III", note)
    start = 12 + ((namesz + 3) & ~3)
    return note[start:start + descsz].decode("ascii", "replace") if kind == 4 else ""


def _first_load(fh: BinaryIO, header: bytes) -> int:
    """The page-aligned address of the first PT_LOAD at file offset 0 (0 where there is none)."""
    phoff, phentsize, phnum = struct.unpack_from("<Q", header, 32)[0], *struct.unpack_from("<HH", header, 54)
    table = os.pread(fh.fileno(), phentsize * min(phnum, 256), phoff) if phentsize >= 56 else b""
    for pos in range(0, len(table) - 55, phentsize):
        kind, _flags, offset, vaddr = struct.unpack_from("<IIQQ", table, pos)
        if kind == PT_LOAD and offset == 0:
            return int(vaddr) & ~0xFFF
    return 0


def _load(path: str) -> GoBinary | None:
    info = read_elf(path, NO_SYMBOLS)
    with open(path, "rb") as fh:
        header = fh.read(64)
        if len(header) < 64 or header[4:6] != b"\x02\x01":          # ELF64, little-endian
            return None
        base = _first_load(fh, header)
    blob = read_section(path, info, ".go.buildinfo", 64 << 10) if ".go.buildinfo" in info.sections else (
        _scan_for_buildinfo(path) if not info.sections else b"")
    build = parse_buildinfo(blob)
    symbols: dict[str, tuple[int, int]] = {}
    if info.has_symtab and ".symtab" in info.sections and ".strtab" in info.sections:
        symbols = parse_symbols(read_section(path, info, ".symtab", 256 << 20),
                                read_section(path, info, ".strtab", 256 << 20), frozenset(RUNTIME_SYMBOLS))
    if build is None and "runtime.buildVersion" not in symbols:
        return None
    has_dwarf = any(n in info.sections for n in (".debug_info", ".zdebug_info"))
    build_id = _build_id(read_section(path, info, ".note.go.buildid", 4096))
    pie = struct.unpack_from("<H", header, 16)[0] == ET_DYN
    return GoBinary(path, build, symbols, has_dwarf, pie, build_id, base)


def read_go_binary(path: str) -> GoBinary | None:
    """The Go facts of the program at ``path``; None for a file that is no Go program.
    OSError where it cannot be read; MalformedInput where it is damaged."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise MalformedInput("ELF file", f"{path}: not a regular file")
    identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    if identity not in _FILES:
        if len(_FILES) >= _KEPT:
            _FILES.pop(next(iter(_FILES)))
        _FILES[identity] = _load(path)
    return _FILES[identity]
