"""memgap.sources.page_bits: a bitmap kept in a mapping of memgap's own answers as the bytes it stands for
(index, count between bounds, find, slices), on laid-out and random bitmaps; a small one stays plain bytes."""
import random

import pytest

from memgap.sources.page_bits import PIECE, PageBits, done, new_bits


def filled(data: bytes) -> PageBits:
    bits = PageBits(len(data))
    for at in range(0, len(data), PIECE):
        bits[at:at + min(PIECE, len(data) - at)] = data[at:at + PIECE]
    return bits


@pytest.mark.parametrize("seed", range(4))
def test_a_page_bits_answers_as_its_bytes(seed):
    rng = random.Random(seed)
    size = rng.randrange(PIECE, 5 * PIECE)
    data = bytes(rng.random() < 0.3 for _ in range(size))
    bits = filled(data)
    assert len(bits) == size and bits.count(1) == data.count(1) and bits.count(0) == data.count(0)
    for _ in range(50):
        lo = rng.randrange(size)
        hi = rng.randrange(lo, size + 1)
        assert bits.count(1, lo, hi) == data.count(1, lo, hi), (lo, hi)
        assert bits.find(1, lo) == data.find(1, lo) and bits.find(0, lo, hi) == data.find(0, lo, hi), (lo, hi)
        assert bits[lo] == data[lo] and bits[-1] == data[-1]
        assert bits[lo:lo + 64:4] == data[lo:lo + 64:4]
    assert bits.find(1, size) == -1 and bits.count(1, size + 5) == 0
    with pytest.raises(IndexError):
        bits[size]


def test_a_page_bits_is_set_whole_slices_only():
    bits = PageBits(PIECE)
    with pytest.raises(ValueError):
        bits[0:10] = b"\x01" * 9


def test_a_small_bitmap_stays_plain_bytes_and_a_large_one_leaves_malloc():
    small = new_bits(PIECE - 1)
    small[0:3] = b"\x01\x00\x01"
    assert done(small) == b"\x01\x00\x01" + bytes(PIECE - 4) and isinstance(done(small), bytes)
    assert isinstance(new_bits(PIECE), PageBits)
