"""What a forked worker copied from its parent, worked out by hand: pagemap entries split into copied and
its own, and the ranges it inherited (read-only ones never copied). On real preforked trees against
each worker's smaps: tests/live/test_cow.py."""
from memgap.explain.cow import inherited_ranges, split_pages
from memgap.sources.procfs import Mapping


def page(*entries):
    """Raw pagemap bytes for these entries."""
    return b"".join(e.to_bytes(8, "little") for e in entries)


def test_split_pages_and_inherited_ranges_by_hand():
    present, exclusive = 1 << 63, (1 << 63) | (1 << 56)
    # child pages: private, private, shared, private; parent pages: present, absent, present, present
    copied, own, bitmap = split_pages(page(exclusive, exclusive, present, exclusive),
                                      page(present, 0, present, present))
    assert (copied, own, bitmap) == (2, 1, bytes([1, 0, 0, 1]))
    rw, ro = "rw-p", "r--p"
    child = [Mapping(0x1000, 0x5000, rw, 0, "", 0, ""), Mapping(0x8000, 0x9000, ro, 0, "", 0, "/lib")]
    parent = [Mapping(0x3000, 0x7000, rw, 0, "", 0, ""), Mapping(0x8000, 0x9000, ro, 0, "", 0, "/lib")]
    assert inherited_ranges(child, parent) == [(0x3000, 0x5000)]  # read-only pages are never copied
