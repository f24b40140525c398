"""Parsers on outputs captured from real processes (tests/fixtures)."""
import json
import os
import pathlib
import struct

import pytest

from conftest import FIXTURES, read
from memgap.errors import MalformedInput
from memgap.sources import procfs
from memgap.sources.glibc import arena_totals, parse_malloc_info
from memgap.sources.jemalloc import jemalloc_mappings, parse_jemalloc_stats_json
from memgap.sources.pymalloc import parse_debugmallocstats, pymalloc_totals


def test_smaps_add_up_to_rollup_and_status(capture):
    entries = procfs.parse_smaps(read(os.path.join(capture, "proc_self_smaps.txt")))
    rollup = procfs.parse_smaps(read(os.path.join(capture, "proc_self_smaps_rollup.txt")))[0]
    status = procfs.parse_status(read(os.path.join(capture, "proc_self_status.txt")))
    maps = procfs.parse_maps(read(os.path.join(capture, "proc_self_maps.txt")))
    rss = sum(e.get("Rss") for e in entries)
    # smaps and smaps_rollup were read a moment apart from one live process
    assert abs(rss - rollup.get("Rss")) <= 0.02 * rollup.get("Rss")
    assert abs(rollup.get("Rss") - status["VmRSS"]) <= 0.02 * status["VmRSS"]
    assert status["VmRSS"] == status["RssAnon"] + status["RssFile"] + status["RssShmem"]
    assert abs(len(entries) - len(maps)) <= 3
    if "jemalloc" not in capture:
        assert any(e.mapping.path == "[heap]" for e in entries)
    assert all(e.mapping.end > e.mapping.start for e in entries)


def test_smaps_pss_agrees_with_the_full_parser(capture):
    """The lean reader of Rss, Pss and private bytes, against every counter parsed in full."""
    text = read(os.path.join(capture, "proc_self_smaps.txt"))
    lean, full = procfs.parse_smaps_pss(text), procfs.parse_smaps(text)
    assert [(m.start, m.end) for m in lean] == [(e.mapping.start, e.mapping.end) for e in full]
    for m, e in zip(lean, full, strict=True):
        assert (m.rss, m.pss, m.private) == (e.get("Rss"), e.get("Pss"),
                                             e.get("Private_Clean") + e.get("Private_Dirty"))
        assert 0.0 <= m.shared_share <= 1.0
    with pytest.raises(MalformedInput):
        procfs.parse_smaps_pss(text.replace("Pss:", "Pss: x", 1))


def test_malloc_info_totals_match_mallinfo2(capture):
    info = parse_malloc_info(read(os.path.join(capture, "malloc_info.xml")))
    meta = json.loads(read(os.path.join(capture, "meta.json")))
    assert info.system == sum(a.system for a in info.arenas)
    assert [a.nr for a in info.arenas] == list(range(len(info.arenas)))
    mi = meta.get("mallinfo2") or {k: v * 2**20 for k, v in meta["mallinfo2_mib"].items()}
    if "jemalloc" in capture:
        return  # glibc's malloc_info there describes an allocator nobody used
    assert info.mmap_bytes == pytest.approx(mi["hblkhd"], rel=0.05)
    in_use = sum(a.in_use for a in info.arenas)
    assert in_use == pytest.approx(mi["uordblks"], rel=0.05)
    for arena in info.arenas[1:]:
        assert arena.aspace_total >= arena.system - 4096


def test_the_quick_readers_agree_with_the_full_parsers(capture):
    """arena_totals and pymalloc_totals (the pytest plugin's, twice a test) give what the full parsers give."""
    xml = read(os.path.join(capture, "malloc_info.xml"))
    assert arena_totals(xml) == [(a.nr, a.in_use, a.free) for a in parse_malloc_info(xml).arenas]
    text = read(os.path.join(capture, "debugmallocstats.txt"))
    full, quick = parse_debugmallocstats(text), pymalloc_totals(text)
    assert full is not None and quick is not None
    assert (quick.allocated_blocks_bytes, quick.arenas_current, quick.arena_size, quick.free_bytes) == (
        full.allocated_blocks_bytes, full.arenas_current, full.arena_size, full.free_bytes)
    with pytest.raises(MalformedInput):
        arena_totals(xml.replace('<system type="current"', '<system type="now"', 1))
    assert pymalloc_totals("no arenas here") is None


def test_debugmallocstats_adds_up(capture):
    stats = parse_debugmallocstats(read(os.path.join(capture, "debugmallocstats.txt")))
    assert stats is not None
    assert stats.arena_size == 1 << 20 and stats.pool_size == 16 << 10
    accounted = (stats.allocated_blocks_bytes + stats.available_blocks_bytes
                 + stats.unused_pools * stats.pool_size + stats.pool_headers_bytes
                 + stats.quantization_bytes + stats.arena_alignment_bytes)
    assert accounted == stats.arenas_bytes  # the "Total" line of the same output


def test_jemalloc_stats_json():
    folder = os.path.join(FIXTURES, "many-arenas", "jemalloc-5.3-py3.12")
    stats = parse_jemalloc_stats_json(read(os.path.join(folder, "jemalloc_stats.json")))
    assert stats.allocated <= stats.active <= stats.resident <= stats.mapped
    text = read(os.path.join(folder, "jemalloc_stats.txt"))  # printed a moment later
    line = next(line for line in text.splitlines() if line.startswith("Allocated: "))
    assert int(line.split()[1].rstrip(",")) == pytest.approx(stats.allocated, rel=0.01)


def test_jemalloc_mappings_are_the_noreserve_ones():
    """In the captured 16-thread Python process under jemalloc, the private anonymous mappings
    flagged "nr" are exactly what jemalloc maps (stats.mapped) and retains, to the byte; and
    stats.resident is an upper bound, 26.8 MB above the pages resident in them."""
    folder = os.path.join(FIXTURES, "many-arenas", "jemalloc-5.3-py3.12")
    stats = parse_jemalloc_stats_json(read(os.path.join(folder, "jemalloc_stats.json")))
    entries = procfs.parse_smaps(read(os.path.join(folder, "proc_self_smaps.txt")))
    ranges = jemalloc_mappings(entries)
    assert sum(end - start for start, end in ranges) == stats.mapped + stats.retained
    resident = sum(e.get("Rss") for e in entries if (e.mapping.start, e.mapping.end) in ranges)
    assert resident == 132_685_824 and stats.resident - resident == 26_779_648
    # thread stacks, guard pages and Python's own mappings carry no "nr"
    assert not any(e.mapping.path == "[stack]" or "nh" in e.vmflags for e in entries
                   if (e.mapping.start, e.mapping.end) in ranges)
    assert stats.muzzy == 0  # pmuzzy 0 in the merged arena stats


def test_noreserve_flags_are_read_again_only_for_new_ranges():
    """smaps costs a page-table walk: the flags are kept per process while maps shows no new range."""
    from memgap.explain import snapshot as collect

    folder = os.path.join(FIXTURES, "many-arenas", "jemalloc-5.3-py3.12")
    smaps = procfs.parse_smaps(read(os.path.join(folder, "proc_self_smaps.txt")))

    class Reader:
        numeric_pid, reads = -4242, 0

        def smaps(self):
            self.reads += 1
            return smaps

    reader, maps = Reader(), [e.mapping for e in smaps]
    first = collect.allocator_mappings(reader, maps, "jemalloc")
    assert first == ("jemalloc", jemalloc_mappings(smaps)) and reader.reads == 1
    # a mapping gone is no reason to read again; a range never seen is
    assert collect.allocator_mappings(reader, maps[1:], "jemalloc") and reader.reads == 1
    grown = [procfs.Mapping(m.start, m.end + 4096, m.perms, 0, m.dev, 0, "") if "nr" in e.vmflags else m
             for m, e in zip(maps, smaps, strict=True)]
    collect.allocator_mappings(reader, grown, "jemalloc")
    assert reader.reads == 2
    from memgap.allocators import jemalloc

    jemalloc._NORESERVE.pop(reader.numeric_pid)


def test_struct_pthread_found_by_its_self_pointers():
    """x86-64 tcbhead_t at the top of a glibc thread stack: tcb and self (offsets 0 and 16) hold its
    own address, dtv (8) a pointer; frames below hold many pointers into the same stack."""
    from memgap.sources.memory_map import _self_pointer

    page = 0x7F9B3A5FF000
    data = bytearray(4096)
    for offset in range(0, 1728, 16):  # saved frame pointers and the like: addresses in this page
        struct.pack_into("<Q", data, offset, page + offset + 64)
    struct.pack_into("<3Q", data, 1712, page + 1712, 0, page + 1712)  # a null dtv: not a tcbhead_t
    struct.pack_into("<3Q", data, 0x6C0, page + 0x6C0, 0x55D0C0DE0000, page + 0x6C0)  # 2,368 bytes below the top
    assert _self_pointer(data, page) == page + 0x6C0
    struct.pack_into("<Q", data, 0x6C0 + 16, page)  # self no longer its own address
    assert _self_pointer(data, page) is None


def test_stat_with_parentheses_in_name():
    line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3"
    stat = procfs.parse_stat(line)
    assert (stat.tid, stat.comm, stat.state, stat.ppid, stat.start_time) == (4242, "my (odd) name", "S", 1, 987654)


def test_environ_and_syscall():
    assert procfs.parse_environ(b"A=1\0MALLOC_ARENA_MAX=2\0EMPTY=\0junk\0") == {
        "A": "1", "MALLOC_ARENA_MAX": "2", "EMPTY": ""}
    sp = procfs.parse_syscall_sp("202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd5a3c1e08 0x7f3e2b1c2d3e\n")
    assert sp == 0x7FFD5A3C1E08
    assert procfs.parse_syscall_sp("running\n") is None


def test_pagemap_counts():
    present, swapped, file_page = 1 << 63, 1 << 62, 1 << 61
    entries = [present, present | file_page, 0, swapped, present, 0]
    counts = procfs.count_pagemap(struct.pack("<6Q", *entries))
    assert (counts.present, counts.anon_present, counts.swapped) == (3, 2, 1)
    assert procfs.present_bitmap(struct.pack("<3Q", present, 0, present)) == b"\x01\x00\x01"
    exclusive = 1 << 56  # set by the kernel only beside present; a stray one on an absent page counts nothing
    entries = [present | exclusive, present | file_page | exclusive, present, exclusive, present | file_page]
    counts = procfs.count_pagemap(struct.pack("<5Q", *entries))
    assert (counts.exclusive, counts.anon_exclusive) == (2, 1)
    assert procfs.exclusive_bitmap(struct.pack("<5Q", *entries)) == b"\x01\x01\x00\x00\x00"
    with pytest.raises(MalformedInput):
        procfs.count_pagemap(b"\x00" * 7)


@pytest.mark.parametrize("text", [
    "", "<malloc>", "<other/>", "<malloc><heap nr='0'></heap></malloc>",
    '<malloc><heap nr="x"><system type="current" size="1"/><total type="rest" count="1" size="2"/></heap></malloc>',
])
def test_malloc_info_malformed(text):
    with pytest.raises(MalformedInput):
        parse_malloc_info(text)


@pytest.mark.parametrize("name,text", [
    ("maps", "not a map line\n"),
    ("maps", "zz-yy r-xp 0 00:00 0\n"),
    ("smaps", "Rss: 4 kB\n"),
    ("smaps", "00400000-00401000 r--p 00000000 fe:00 1 /bin/x\nRss: lots kB\n"),
    ("status", "garbage\n"),
])
def test_proc_malformed(name, text):
    parse = {"maps": procfs.parse_maps, "smaps": procfs.parse_smaps, "status": procfs.parse_status}[name]
    with pytest.raises(MalformedInput):
        parse(text)


def test_truncated_captures_never_crash(capture):
    """A file cut anywhere parses or raises MalformedInput, nothing else."""
    for name, parse in (("proc_self_smaps.txt", procfs.parse_smaps), ("malloc_info.xml", parse_malloc_info),
                        ("debugmallocstats.txt", parse_debugmallocstats), ("proc_self_maps.txt", procfs.parse_maps)):
        text = read(os.path.join(capture, name))
        for cut in range(1, len(text), max(1, len(text) // 40)):
            try:
                parse(text[:cut])
            except MalformedInput:
                pass


def test_vmstat_counts():
    from memgap.sources.procfs import parse_vmstat

    text = "nr_free_pages 5690000\noom_kill 3\nbroken line\nthp_fault_alloc 12\n"
    assert parse_vmstat(text) == {"nr_free_pages": 5690000, "oom_kill": 3, "thp_fault_alloc": 12}


def test_elf_reader_on_this_libc():
    """glibc's library read for its symbols: the API family memgap tells it by (the other allocators'
    libraries, installed by apt: tests/live/test_elf_built_here.py)."""
    from memgap.allocators.detect import families, signs
    from memgap.sources.elf import read_elf

    libc = read_elf("/lib/x86_64-linux-gnu/libc.so.6", signs().query)
    assert libc.soname == "libc.so.6" and libc.dynamic and "malloc" in libc.exported
    assert [f[:2] for f in families(libc)] == [("glibc", "")]


def test_elf_reader_damaged_files_and_cache(tmp_path):
    """A cut, empty or foreign file gives a clear MalformedInput naming it; a file read once is not read
    again until it changes (inode, size, mtime, ctime)."""
    import shutil

    from memgap.allocators.detect import signs
    from memgap.errors import MalformedInput
    from memgap.sources.elf import read_elf

    query = signs().query
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    data = pathlib.Path(libc).read_bytes()
    for name, content in (("empty", b""), ("text", b"#!/bin/sh\necho hi\n"), ("head", data[:64]),
                          ("cut", data[:len(data) // 2]), ("noise", b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 8)):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(MalformedInput, match=f"malformed ELF file: {path}: "):
            read_elf(str(path), query)
    copy = tmp_path / "libc.so.6"
    shutil.copy(libc, copy)
    first = read_elf(str(copy), query)
    assert read_elf(str(copy), query) is first
    copy.write_bytes(data[:64])  # the same path, another file: read again, and found damaged
    with pytest.raises(MalformedInput):
        read_elf(str(copy), query)
    with pytest.raises(OSError):
        read_elf(str(tmp_path / "missing"), query)


def test_classify_a_program_with_redis_bundled_jemalloc():
    """Redis as upstream builds it: jemalloc linked in under je_ (its dynamic symbols export je_mallctl,
    je_mallctlnametomib, je_malloc_stats_print, as reported in issue 12), malloc left to glibc.
    The program's symbols are hand-built from that report; libc is this machine's."""
    from memgap.allocators.detect import classify, signs
    from memgap.allocators.registry import reader_for
    from memgap.sources.elf import ElfInfo, read_elf

    libc_path = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    api = frozenset({"je_mallctl", "je_mallctlnametomib", "je_malloc_stats_print", "main"})
    redis = ElfInfo(api, frozenset({"malloc", "free"}), api, ("libm.so.6", "libc.so.6"), "", True, False, {})
    objects = {"/usr/local/bin/redis-server": redis, libc_path: read_elf(libc_path, signs().query)}
    d = classify("/usr/local/bin/redis-server", objects, [], {})
    assert (d.name, d.library, reader_for(d.name).libc_calls, d.others) == ("glibc", libc_path, True, ["jemalloc"])
    assert [(f.name, f.library, f.prefix, f.serves_malloc, f.exported) for f in d.found] == [
        ("glibc", libc_path, "", True, True), ("jemalloc", "/usr/local/bin/redis-server", "je_", False, True)]
