"""The lab's variants against this machine: the allocator libraries its loader finds (ldconfig), the
tunables its glibc lists (ld.so --list-tunables). Both start a program; the pure parts are in
tests/unit/test_lab_units.py."""
import pytest

from memgap.allocators import variants as V  # noqa: N812 - a short alias, on most lines
from memgap.allocators.catalog import CATALOGUE, Allocator
from memgap.errors import UsageError


def test_missing_allocator_is_skipped_with_the_install_line(monkeypatch):
    missing = Allocator("mimalloc", "libmimalloc-not-here.so.9", "libmimalloc2.0", "MIMALLOC_*")
    monkeypatch.setitem(CATALOGUE, "mimalloc", missing)
    ready, skipped = V.resolve([V.parse_variant("glibc"), V.parse_variant("mimalloc")])
    assert [v.spec for v in ready] == ["glibc"]
    assert skipped == ["mimalloc: libmimalloc-not-here.so.9 not found; install it with "
                       "`apt-get install libmimalloc2.0`"]


def test_tunables_are_checked_against_what_this_glibc_lists():
    """This glibc's loader lists its tunables (the listing's parser: tests/unit/test_lab_units.py)."""
    from memgap.sources.glibc_tunables import list_tunables

    if list_tunables() is None:
        pytest.skip("this machine's loader cannot list its tunables")
    V.check_tunables([V.parse_variant("glibc:glibc.malloc.tcache_count=0")])
    with pytest.raises(UsageError, match=r"no tunable 'glibc\.malloc\.arena_mx'.*glibc\.malloc\.arena_max"):
        V.check_tunables([V.parse_variant("glibc:glibc.malloc.arena_mx=2")])
    with pytest.raises(UsageError, match="outside glibc's range"):
        V.check_tunables([V.parse_variant("glibc:glibc.malloc.arena_max=0")])
