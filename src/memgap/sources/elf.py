"""Just enough ELF to answer: does this file define a dynamic symbol, or import it?

A non-PIE program that takes ``malloc``'s address gets a canonical PLT entry:
``dlsym`` and ``dladdr`` then name the program itself, although the function
it jumps to is libc's. The program's ``.dynsym`` says which it is: an imported
symbol has section index 0 (SHN_UNDEF).
"""
from __future__ import annotations

import struct

SHT_DYNSYM = 11
SHN_UNDEF = 0


def parse_defines(data: bytes, name: bytes) -> bool | None:
    """What ``data`` (an ELF file's bytes) says of ``name``: defined, imported, or None (not said)."""
    try:
        return _parse_defines(data, name)
    except (struct.error, IndexError):
        return None


def _parse_defines(data: bytes, name: bytes) -> bool | None:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # 64-bit little-endian only
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if not shoff or shentsize < 64 or shoff + shnum * shentsize > len(data):
        return None
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != SHT_DYNSYM or entsize < 24 or link >= shnum:
            continue
        str_offset, str_size = sections[link][4], sections[link][5]
        strings = data[str_offset:str_offset + str_size]
        for pos in range(offset, min(offset + size, len(data) - 23), entsize):
            st_name, _st_info, _st_other, st_shndx = struct.unpack_from("<IBBH", data, pos)
            end = strings.find(b"\0", st_name)
            if end >= 0 and strings[st_name:end] == name:
                return st_shndx != SHN_UNDEF
    return None


def defines_symbol(path: str, name: str) -> bool | None:
    """True if ``path``'s dynamic symbols define ``name``, False if they import it, None if unknown."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return parse_defines(data, name.encode())
