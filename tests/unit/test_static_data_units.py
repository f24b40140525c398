"""Libraries' static data (.bss), issue 31: the PT_LOAD program headers parsed from plain bytes (both classes
and byte orders, hand-built here, and this machine's libc read as a file), the ranges worked out by hand, and
the captured PyTorch processes' maps (``fixtures/torch-2.11-cuda13/``, whose ELF files were not captured): the
likely range from the maps alone, its resident bytes from smaps. The live half: ``tests/live/test_static_data.py``.
"""
import os
import struct

import pytest

from conftest import HERE
from memgap.errors import MalformedInput
from memgap.sources import procfs
from memgap.sources.elf_segments import LoadSegment, parse_segments_bytes, read_segments
from memgap.sources.procfs import Mapping
from memgap.sources.static_data import bss_ranges, load_base, static_ranges

KiB, MiB, PAGE = 1 << 10, 1 << 20, 4096
TORCH = os.path.join(HERE, "fixtures", "torch-2.11-cuda13")


def elf(cls, order, phdrs, phentsize=None, phnum=None):
    """An ELF file: its header, then its program headers (type, offset, vaddr, filesz, memsz) at 0x40."""
    end = "<" if order == 1 else ">"
    phdr = "IIQQQQQQ" if cls == 2 else "IIIIIIII"
    size = struct.calcsize(end + phdr)
    head = b"\x7fELF" + bytes([cls, order, 1]) + bytes(9)
    fmt = "HHIQQQIHHHHHH" if cls == 2 else "HHIIIIIHHHHHH"
    head += struct.pack(end + fmt, 3, 62, 1, 0, 0x40, 0, 0, 64, phentsize or size,
                        len(phdrs) if phnum is None else phnum, 64, 0, 0)
    head = head.ljust(0x40, b"\0")
    for kind, offset, vaddr, filesz, memsz in phdrs:
        fields = ((kind, 6, offset, vaddr, vaddr, filesz, memsz, PAGE) if cls == 2 else
                  (kind, offset, vaddr, vaddr, filesz, memsz, 6, PAGE))
        head += struct.pack(end + phdr, *fields).ljust(phentsize or size, b"\0")
    return head


# a library's layout: text at 0, data at 0x3000 with 0x100 bytes in the file and 0x5000 in memory; a PT_DYNAMIC
# (type 2) left out
PHDRS = [(1, 0, 0, 0x2000, 0x2000), (2, 0x3010, 0x3010, 0x80, 0x80), (1, 0x3000, 0x3000, 0x100, 0x5000)]


@pytest.mark.parametrize("cls", [1, 2], ids=["32-bit", "64-bit"])
@pytest.mark.parametrize("order", [1, 2], ids=["little", "big"])
def test_program_headers_parse_in_both_classes_and_byte_orders(cls, order):
    assert parse_segments_bytes(elf(cls, order, PHDRS)) == (LoadSegment(0, 0, 0x2000, 0x2000),
                                                            LoadSegment(0x3000, 0x3000, 0x100, 0x5000))
    padded = elf(cls, order, PHDRS, phentsize=0x80)  # a larger entry size: each entry read at its own stride
    assert len(parse_segments_bytes(padded)) == 2


@pytest.mark.parametrize("data, words", [
    (b"", "outside the file"), (b"\x7fELX" + bytes(60), "no ELF magic"),
    (b"\x7fELF\x03\x01" + bytes(58), "unknown class"),
    (elf(2, 1, PHDRS)[:0x60], "outside the file"), (elf(2, 1, PHDRS, phentsize=8), "program headers of 8 bytes"),
    (elf(2, 1, [(1, 0, 0, 0x3000, 0x2000)]), "0x3000 file bytes in 0x2000"),
])
def test_damaged_headers_are_malformed_input(data, words):
    with pytest.raises(MalformedInput, match=words):
        parse_segments_bytes(data)


def test_no_program_headers_is_no_segment():
    assert parse_segments_bytes(elf(2, 1, [], phnum=0)) == ()


def test_this_machines_libc_has_a_zero_filled_segment():
    segments, inode = read_segments("/lib/x86_64-linux-gnu/libc.so.6")
    assert inode == os.stat("/lib/x86_64-linux-gnu/libc.so.6").st_ino
    assert len(segments) >= 2 and segments[0].offset == 0
    assert any(s.memsz > s.filesz for s in segments)  # glibc's own .bss (main_arena's neighbours)
    assert read_segments("/lib/x86_64-linux-gnu/libc.so.6")[0] is segments  # read once per file version
    with pytest.raises(MalformedInput, match="no ELF magic"):
        read_segments(os.path.join(TORCH, "README.md"))


def test_ranges_by_hand():
    segments = parse_segments_bytes(elf(2, 1, PHDRS))
    # loaded at 0x7f0000000000: file bytes of the data segment end at +0x3100, its page at +0x4000;
    # its memory ends at +0x8000
    base = load_base(segments, 0x7F0000000000)
    assert base == 0x7F0000000000
    assert bss_ranges(segments, base) == [(0x7F0000004000, 0x7F0000008000)]
    # a program linked at 0x400000 (not position-independent): its base is 0
    linked = (LoadSegment(0, 0x400000, 0x1000, 0x1000), LoadSegment(0x1000, 0x601000, 0x10, 0x10000))
    assert load_base(linked, 0x400000) == 0
    assert bss_ranges(linked, 0) == [(0x602000, 0x611000)]


def m(start, end, perms="r--p", offset=0, inode=0, path=""):
    return Mapping(start, end, perms, offset, "fe:00" if inode else "00:00", inode, path)


LIB = "/lib/libbig.so"
# libbig.so loaded at 0x7f0000000000 (PHDRS), its .bss [+0x4000, +0x8000) merged by the kernel with an anonymous
# mapping after it up to +0x20000; then libother.so (no .bss) and its own anonymous neighbour
MAPS = [m(0x7F0000000000, 0x7F0000002000, "r-xp", 0, 7, LIB),
        m(0x7F0000003000, 0x7F0000004000, "rw-p", 0x3000, 7, LIB), m(0x7F0000004000, 0x7F0000020000, "rw-p"),
        m(0x7F0000100000, 0x7F0000101000, "r-xp", 0, 8, "/lib/libother.so"),
        m(0x7F0000101000, 0x7F0000102000, "rw-p", 0x1000, 8, "/lib/libother.so"),
        m(0x7F0000102000, 0x7F0000110000, "rw-p")]
SEGMENTS = {LIB: (parse_segments_bytes(elf(2, 1, PHDRS)), 7),
            "/lib/libother.so": ((LoadSegment(0, 0, 0x1000, 0x1000), LoadSegment(0x1000, 0x1000, 0x800, 0x800)), 8)}


def test_only_the_computed_range_is_claimed_in_a_merged_mapping():
    found = static_ranges(MAPS, lambda path: SEGMENTS[path])
    assert [(r.start, r.end, r.path, r.from_elf) for r in found] == [(0x7F0000004000, 0x7F0000008000, LIB, True)]


def test_a_file_not_read_gives_the_likely_range_from_the_maps():
    def hidden(path):
        if path == LIB:
            raise FileNotFoundError(path)  # e.g. in a container whose root cannot be seen
        return SEGMENTS[path]

    found = static_ranges(MAPS, hidden)
    # the whole anonymous mapping after its writable segment: the maps cannot tell where the .bss ends
    assert [(r.start, r.end, r.path, r.from_elf) for r in found] == [(0x7F0000004000, 0x7F0000020000, LIB, False)]


def test_a_file_replaced_on_disk_gives_the_likely_range_and_no_elf_none():
    replaced = static_ranges(MAPS, lambda path: (SEGMENTS[path][0], 99))  # another inode at that path now
    assert {(r.path, r.from_elf) for r in replaced} == {(LIB, False), ("/lib/libother.so", False)}

    def not_elf(path):
        raise MalformedInput("ELF file", "no ELF magic")

    assert static_ranges(MAPS, not_elf) == []


def _captured(name):
    with open(os.path.join(TORCH, name, "proc_maps.txt")) as f:
        maps = procfs.parse_maps(f.read())
    with open(os.path.join(TORCH, name, "proc_smaps.txt")) as f:
        smaps = {e.mapping.start: e for e in procfs.parse_smaps(f.read())}
    return maps, smaps


@pytest.mark.parametrize("name, resident_kib", [("cpu", 83756), ("cuda", 84092)])
def test_pytorchs_cublaslt_static_data_found_from_its_maps(name, resident_kib, tmp_path):
    maps, smaps = _captured(name)
    # the ELF files were not captured: each one read under a root that does not exist here
    found = static_ranges(maps, lambda path: read_segments(str(tmp_path / "gone") + path))
    assert found and not any(r.from_elf for r in found)
    resident = {}
    for r in found:
        entry = smaps[r.start]  # a whole anonymous mapping, as maps shows it
        assert (entry.mapping.end, entry.mapping.path, entry.mapping.perms) == (r.end, "", "rw-p")
        resident[os.path.basename(r.path)] = resident.get(os.path.basename(r.path), 0) + entry.get("Rss")
    # libcublasLt's: its 84 MiB mapping lies between its writable segment and its next file mapping
    assert resident["libcublasLt.so.13"] == resident_kib * KiB
    assert 81 * MiB < resident["libcublasLt.so.13"] < 83 * MiB
    assert max(resident, key=resident.get) == "libcublasLt.so.13"
