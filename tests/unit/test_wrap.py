"""How a renderer's cell wraps: between the parts of a variant or a label, folding only a word that has
no break of its own (every renderer at 50, 80 and 120 columns on real commands:
tests/live/test_widths.py)."""


def test_wrap_breaks_between_parts_and_folds_only_what_has_none():
    from memgap.report.fit import wrap

    assert wrap("jemalloc:background_thread=true,dirty_decay_ms=1000", 24) == [
        "jemalloc:", "background_thread=true,", "dirty_decay_ms=1000"]
    assert wrap("C allocator free (retained)", 12) == ["C allocator", "free", "(retained)"]
    assert wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"]
