"""The ELF reader's symbol search (memgap.sources.elf_symbols) against decoding every symbol: ELF files
built in the test, 32- and 64-bit, both byte orders, with string tables whose names share their tails
(``malloc`` pointing into ``__libc_malloc``), version suffixes, a name run to the table's end and
offsets outside it; fuzzed. The reference below decodes each entry as memgap did before issue 30."""
import os
import struct

import pytest
from hypothesis import given, settings, strategies as st

from memgap.allocators.detect import families, signs
from memgap.errors import MalformedInput
from memgap.sources import elf_symbols
from memgap.sources.elf import ElfInfo, SymbolQuery, parse_elf_bytes

SHT_STRTAB, SHT_SYMTAB, SHT_DYNSYM, SHT_DYNAMIC, SHT_PROGBITS = 3, 2, 11, 6, 1


def build_elf(is64, big, tables, needed=(), rodata=b""):
    """An ELF file: ``tables`` as (dynamic, string table bytes, [(st_name, st_info, st_shndx)]), each with
    its string table; a .dynamic naming ``needed`` (strings of the first table) and a .rodata."""
    order = ">" if big else "<"
    header_size, sh_size, sym = (64, 64, "IBBHQQ") if is64 else (52, 40, "IIIBBH")
    sections, data = [(0, 0, 0, 0, 0, 0)], bytearray(header_size)   # (name, type, offset, size, link, entsize)
    shstr = bytearray(b"\0")

    def add(name, kind, content, link=0, entsize=0):
        shstr.extend(name + b"\0")
        sections.append((len(shstr) - len(name) - 1, kind, len(data), len(content), link, entsize))
        data.extend(content)
        return len(sections) - 1

    first_strings = None
    for dynamic, strings, entries in tables:
        strtab = add(b".dynstr" if dynamic else b".strtab", SHT_STRTAB, strings)
        first_strings = first_strings or strtab
        packed = b"".join(struct.pack(order + sym, *((n, i, 0, s, 0, 0) if is64 else (n, 0, 0, i, 0, s)))
                          for n, i, s in entries)
        add(b".dynsym" if dynamic else b".symtab", SHT_DYNSYM if dynamic else SHT_SYMTAB, packed, strtab,
            struct.calcsize(order + sym))
    if needed:
        dyn = order + ("qQ" if is64 else "iI")
        add(b".dynamic", SHT_DYNAMIC, b"".join(struct.pack(dyn, 1, n) for n in needed) + struct.pack(dyn, 0, 0),
            first_strings, struct.calcsize(dyn))
    add(b".rodata", SHT_PROGBITS, rodata)
    shstrndx = add(b".shstrtab", SHT_STRTAB, b"")   # its name is in it: written last
    name, kind, _offset, _size, link, entsize = sections[shstrndx]
    sections[shstrndx] = (name, kind, len(data), len(shstr), link, entsize)
    data.extend(shstr)
    shoff = len(data)
    for name, kind, offset, size, link, entsize in sections:
        fields = (name, kind, 0, 0, offset, size, link, 0, 1, entsize)
        data.extend(struct.pack(order + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"), *fields))
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 2 if big else 1, 1]) + bytes(9)
    rest = (3, 62, 1, 0, 0, shoff, 0, header_size, 0, 0, sh_size, len(sections), shstrndx)
    data[:header_size] = ident + struct.pack(order + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"), *rest)
    return bytes(data)


def reference(tables, query):
    """(exported, imported, defined) as decoding every entry gives them, then keeping those the query asks."""
    exported, imported, defined = set(), set(), set()
    for dynamic, strings, entries in tables:
        for st_name, st_info, st_shndx in entries:
            if st_name >= len(strings):
                continue
            end = strings.find(b"\0", st_name)
            name = strings[st_name:end if end >= 0 else len(strings)].decode("utf-8", "replace").partition("@")[0]
            if not name or not query.wants(name):
                continue
            if st_shndx:
                defined.add(name)
                if dynamic and st_info >> 4:
                    exported.add(name)
            elif dynamic:
                imported.add(name)
    return exported, imported, defined


def symbols_of(info):
    return set(info.exported), set(info.imported), set(info.defined)


# __libc_malloc's tail is malloc; je_mallctl's is mallctl; a version suffix; a name run to the table's end
STRINGS = b"\0__libc_malloc\0je_mallctl\0free\0malloc@GLIBC_2.2.5\0MallocExtension_GetStats\0x@je_mallocx\0mi_free"


def offset(name, within=STRINGS):
    return within.index(name)


@pytest.mark.parametrize("is64", [True, False], ids=["64-bit", "32-bit"])
@pytest.mark.parametrize("big", [False, True], ids=["little-endian", "big-endian"])
def test_tail_merged_names_versions_and_the_tables_end(is64, big):
    """``malloc`` read from the tail of ``__libc_malloc`` (defined: .dynsym and .symtab), an imported
    ``je_mallctl`` and a local one, a versioned name, a name with no NUL after it, an offset past the
    table: each as decoding every symbol says, in either class and byte order."""
    entries = [(offset(b"malloc"), 0x12, 7), (offset(b"__libc_malloc"), 0x12, 7), (offset(b"je_mallctl"), 0x10, 0),
               (offset(b"mallctl"), 0x02, 7), (offset(b"free"), 0x12, 7), (offset(b"malloc@"), 0x12, 0),
               (offset(b"MallocExtension_GetStats"), 0x12, 7), (offset(b"je_mallocx"), 0x12, 7),
               (offset(b"mi_free"), 0x22, 7), (len(STRINGS) + 5, 0x12, 7), (0, 0x12, 7)]
    tables = [(True, STRINGS, entries), (False, STRINGS, [(offset(b"je_mallctl"), 0x02, 9)])]
    query = signs().query
    info = parse_elf_bytes(build_elf(is64, big, tables, needed=(offset(b"free"),), rodata=b"xx<jemalloc>: yy"), query)
    assert symbols_of(info) == reference(tables, query)
    assert info.defined == {"malloc", "mallctl", "je_mallctl", "je_mallocx", "MallocExtension_GetStats", "mi_free"}
    assert info.exported == {"malloc", "je_mallocx", "MallocExtension_GetStats", "mi_free"}
    assert info.imported == {"malloc", "je_mallctl"}   # undefined (section 0), one a versioned reference
    assert info.needed == ("free",) and info.dynamic and info.has_symtab and info.rodata_has == {b"<jemalloc>: "}
    # one jemalloc under je_ (mallctl, mallocx), and no unprefixed one: mallctl alone is one entry point
    assert [f[:2] for f in families(info)] == [("jemalloc", "je_")]
    assert parse_elf_bytes(build_elf(is64, big, tables), SymbolQuery()).defined == frozenset()


def test_a_query_of_exact_names_endings_and_beginnings():
    tables = [(True, STRINGS, [(i, 0x12, 1) for i in range(len(STRINGS))])]   # a symbol at every offset
    data = build_elf(True, False, tables)
    for query in (SymbolQuery(names=frozenset({"malloc"})), SymbolQuery(endings=("alloc",)),
                  SymbolQuery(beginnings=("Malloc", "je_")), SymbolQuery(names=frozenset({"c_malloc", "x"}))):
        assert symbols_of(parse_elf_bytes(data, query)) == reference(tables, query)
    assert parse_elf_bytes(data, SymbolQuery(endings=("alloc",))).defined == {
        "__libc_malloc", "_libc_malloc", "libc_malloc", "ibc_malloc", "bc_malloc", "c_malloc", "_malloc", "malloc",
        "alloc"}
    with pytest.raises(ValueError):
        SymbolQuery(names=frozenset({"malloc@GLIBC"}))


NAMES = st.lists(st.sampled_from(["malloc", "je_mallctl", "_rjem_mallocx", "mallctl", "mi_malloc", "tc_malloc",
                                  "__libc_malloc", "free", "MallocExtension_X", "gnu_get_libc_version", "x",
                                  "malloc@GLIBC_2.2.5", "mi_collect@@V1", "\u00e9mallocx", "mallctlbymib", ""])
                 | st.text(alphabet="am_lcxo@\u00e9", max_size=12), min_size=1, max_size=12)


@settings(max_examples=250, deadline=None)
@given(NAMES, st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255), st.integers(0, 3)), max_size=40),
       st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_the_search_finds_what_decoding_every_symbol_finds(names, entries, is64, big, cut, budget):
    """Random string tables (their names sharing tails, NULs missing at the end), symbols pointing
    anywhere in them and past them: the same symbols as the reference, through either way of
    finding the entries (offset by offset, or one pass over all of them)."""
    strings = b"\0" + b"\0".join(n.encode() for n in names) + (b"" if cut else b"\0")
    entries = [(at % (len(strings) + 2), info, section) for at, info, section in entries]   # 2 past the end
    tables = [(True, strings, entries), (False, strings, entries[::-1])]
    kept = elf_symbols.FIND_BUDGET
    elf_symbols.FIND_BUDGET = kept if budget else 0
    try:
        for query in (signs().query, SymbolQuery(endings=("alloc", "c"), beginnings=("m",))):
            assert symbols_of(parse_elf_bytes(build_elf(is64, big, tables), query)) == reference(tables, query)
    finally:
        elf_symbols.FIND_BUDGET = kept


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 2000), st.booleans(), st.booleans())
def test_a_built_file_damaged_is_malformed_input_or_facts(junk, at, is64, big):
    entries = [(offset(b"malloc"), 0x12, 7), (offset(b"je_mallctl"), 0x12, 7), (offset(b"je_mallocx"), 0x12, 7)]
    data = bytearray(build_elf(is64, big, [(True, STRINGS, entries)], needed=(1,), rodata=b"mimalloc: "))
    data[at:at + len(junk)] = junk
    try:
        assert isinstance(parse_elf_bytes(bytes(data), signs().query), ElfInfo)
    except MalformedInput as exc:
        assert str(exc).startswith("malformed ELF file: ")


def test_every_name_gdb_calls_is_read_with_detection():
    """--deep checks the functions it calls in what detection read: each must be asked about."""
    from memgap.sources import mimalloc_gdb, tcmalloc_gdb

    query = signs().query
    for name in (mimalloc_gdb.INFO, mimalloc_gdb.COLLECT, tcmalloc_gdb.GET, tcmalloc_gdb.RELEASE, "_rjem_mallctl",
                 "malloc"):
        assert query.wants(name), name



@pytest.mark.parametrize("at", [0, 5, 4094, 4095, 4096, 8190, 9000])
def test_rodata_is_searched_piece_by_piece_and_across_pieces(monkeypatch, at):
    """A message across the border of two pieces read is found, as one inside a piece."""
    from memgap.sources import elf

    monkeypatch.setattr(elf, "RODATA_PIECE", 4096)
    rodata = bytearray(b"." * 9100)
    rodata[at:at + 12] = b"<jemalloc>: "
    data = build_elf(True, False, [], rodata=bytes(rodata))
    assert parse_elf_bytes(data, signs().query).rodata_has == {b"<jemalloc>: "}
    assert parse_elf_bytes(data, SymbolQuery(rodata=(b"<jemalloc>: x",))).rodata_has == frozenset()


def _machine_libraries():
    """This machine's C libraries that carry (or may carry) an allocator's messages, LLVM's among them."""
    import glob

    names = ("libc.so.6", "libjemalloc.so.2", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libmimalloc.so.2",
             "libLLVM-14.so.1", "libLLVM-15.so.1", "libclang-cpp.so.14")
    found = {}
    for name in names:
        hits = sorted(glob.glob(f"/usr/lib/x86_64-linux-gnu/{name}") + glob.glob(f"/usr/lib/llvm-*/lib/{name}"))
        if hits:
            found[name] = os.path.realpath(hits[0])
    return found


@pytest.mark.parametrize("piece", [None, 1 << 16])
def test_the_anchored_rodata_search_finds_what_a_search_per_string_finds(monkeypatch, piece):
    """On this machine's libraries (glibc, jemalloc, tcmalloc, mimalloc, LLVM's), each .rodata searched
    once per shared anchor finds the messages that searching the whole .rodata for each one finds; with
    small pieces too, where many pieces' borders fall in real data."""
    from memgap.sources import elf

    if piece:
        monkeypatch.setattr(elf, "RODATA_PIECE", piece)
    query = signs().query
    libraries = _machine_libraries()
    assert {"libc.so.6", "libjemalloc.so.2", "libmimalloc.so.2", "libLLVM-14.so.1"} <= set(libraries)
    seen = set()
    for name, path in libraries.items():
        with open(path, "rb") as fh:
            fd = fh.fileno()
            size = os.fstat(fd).st_size
            info = elf.parse_elf(lambda offset, length, fd=fd: os.pread(fd, length, offset), size, query)
            offset, length = info.sections[".rodata"]
            rodata = os.pread(fd, min(length, elf.RODATA_LIMIT), offset)
        expected = {marker for marker in query.rodata if marker in rodata}
        assert info.rodata_has == expected, name
        seen |= expected
    # not a comparison of empty sets: glibc's, jemalloc's and mimalloc's own messages were found
    assert {b"malloc(): corrupted top size", b"<jemalloc>: ", b"mimalloc: "} <= seen


def test_rodata_anchors_group_strings_by_what_they_share():
    from memgap.sources.elf_symbols import rodata_anchors, strings_in

    anchors = rodata_anchors((b"malloc(): x", b"<jemalloc>: ", b"TCMALLOC_X", b"ab"))
    assert anchors == ((b"malloc", ((b"<jemalloc>: ", 3), (b"malloc(): x", 0))), (b"TCMALLOC_X", ((b"TCMALLOC_X", 0),)),
                       (b"ab", ((b"ab", 0),)))
    found = set()
    strings_in(b"jemalloc>: malloc(): x TCMALLOC_", anchors, found)  # one cut at the start, one at the end
    assert found == {b"malloc(): x"}
    strings_in(b"malloc" * 1000 + b"<jemalloc>: ab", anchors, found)  # an anchor everywhere: each searched whole
    assert found == {b"malloc(): x", b"<jemalloc>: ", b"ab"}
