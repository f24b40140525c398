"""memgap.sources.elf_ahead's pure parts: the bytes a read would search, told from the section headers, and
the shares balanced by them (the forking itself: tests/live/test_elf_ahead.py)."""
import os

from memgap.allocators.detect import signs
from memgap.sources import elf_ahead
from memgap.sources.elf import parse_elf, search_size

LIB = "/usr/lib/x86_64-linux-gnu"


def fresh_parse(path):
    with open(path, "rb") as fh:
        return parse_elf(lambda offset, length: os.pread(fh.fileno(), length, offset), os.fstat(fh.fileno()).st_size,
                         signs().query)


def test_search_size_counts_string_tables_and_rodata():
    query = signs().query
    for name in ("libLLVM-15.so.1", "libc.so.6"):
        sections = fresh_parse(f"{LIB}/{name}").sections
        assert search_size(f"{LIB}/{name}", query) == sections[".dynstr"][1] + sections[".rodata"][1], name
    assert search_size(f"{LIB}/libc.so.6", type(query)()) == 0  # a question about nothing searches nothing


def test_shares_balance_by_size():
    sizes = {"a": 100, "b": 60, "c": 50, "d": 10}
    assert elf_ahead.shares(sizes, 2) == [["a", "d"], ["b", "c"]]
    assert elf_ahead.shares({"a": 1}, 3) == [["a"]]
