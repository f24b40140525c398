"""What a forked worker copied from its parent, worked out by hand: pagemap entries split into copied and
its own, and the ranges it inherited (read-only ones never copied). On real preforked trees against
each worker's smaps: tests/live/test_cow.py."""
from memgap.diagnose.copies import FrozenCopies, WorkerCopies, copies_finding, copies_remain
from memgap.documents.snapshot import CowSplit
from memgap.explain.cow import inherited_ranges, split_pages
from memgap.sources.procfs import Mapping

MiB = 1 << 20


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


def _workers(copied_mib, python_share=0.98, private_mib=None):
    return [WorkerCopies(100 + i, CowSplit(99, n * MiB, MiB, 400 * MiB,
                                           {"Python objects (pymalloc arenas)": int(python_share * n * MiB),
                                            "C allocator (glibc heaps)": n * MiB - int(python_share * n * MiB)}),
                         (private_mib or n + 1) * MiB, ((1.0, "peak", 2 * MiB), (4.0, "quiet", n * MiB)))
            for i, n in enumerate(copied_mib)]


def test_copies_said_by_their_cause_with_both_remedies_until_the_collector_frozen_was_measured():
    workers = _workers([40, 42, 41, 40])  # copied 163 MiB, 98% of it Python's (159.7), of 167 MiB private
    unknown = copies_finding(workers)
    assert unknown is not None and unknown.code == "copied-from-parent"
    assert unknown.summary.startswith("4 workers each copied ~40.5 MiB of their parent's Python objects (159.7 MiB "
                                      "of the 163.0 MiB copied, 98% of their private memory), by reading them")
    assert "or by collecting them" in unknown.summary
    assert "gc.freeze()" in unknown.remedy and "numpy or Arrow arrays" in unknown.remedy
    assert "PID 100 over time: 2.0 MiB at 1.0 s (peak), 40.0 MiB at 4.0 s (quiet)" in unknown.evidence
    reads = copies_finding(workers, FrozenCopies(163 * MiB, 160 * MiB))  # frozen: the copies stayed
    assert reads is not None and "by reading them" in reads.summary and "collecting" not in reads.summary
    assert "gc.freeze" not in reads.remedy and "start the workers before the data is built" in reads.remedy
    collector = copies_finding(workers, FrozenCopies(163 * MiB, 10 * MiB))  # frozen: the copies went
    assert collector is not None and "by collecting them" in collector.summary and "reading" not in collector.summary
    assert "gc.freeze()" in collector.remedy and "numpy" not in collector.remedy
    assert any("with the collector frozen at fork" in line for line in collector.evidence)


def test_copies_said_as_reads_where_no_full_collection_ran_before_they_were_read():
    """memgap run's bootstrap counts the full collections in the workers and their parent from the parent's
    first fork (memgap._hook); none before the copies' read rules the collector out; one in any worker, or
    a worker whose parent forked unwatched (None), leaves both causes."""
    from dataclasses import replace

    from memgap.record.tree_copies import Collections

    workers = [replace(w, collections=0) for w in _workers([40, 42, 41, 40])]
    reads = copies_finding(workers)
    assert reads is not None and "by reading them" in reads.summary and "collecting" not in reads.summary
    assert "no full collection ran in them nor in their parent" in reads.summary and "gc.freeze" not in reads.remedy
    assert "(memgap's bootstrap counted them): PID 100 0, PID 101 0, PID 102 0, PID 103 0" in reads.evidence[-2]
    for counted in (1, None):
        either = copies_finding([*workers[:3], replace(workers[3], collections=counted)])
        assert either is not None and "or by collecting them" in either.summary, counted
    # counted from the events: the parent's collection at its exit, after the read, made none of the copies
    seen = Collections()
    for event in ({"type": "forks-watched", "pid": 99, "time": 10.0}, {"type": "full-collection", "pid": 100,
                  "time": 12.0}, {"type": "full-collection", "pid": 99, "time": 30.0}):
        assert seen.add(event)
    assert not seen.add({"type": "snapshot", "pid": 99})
    assert (seen.since_fork(100, 99, until=20.0), seen.since_fork(101, 99, until=20.0)) == (1, 0)
    assert seen.since_fork(101, 99, until=31.0) == 1 and seen.since_fork(201, 200, until=20.0) is None


def test_copies_below_the_floor_or_of_c_memory_are_said_as_such():
    assert copies_finding(_workers([3, 3])) is None  # 6 MiB: under the findings' floor
    assert copies_finding(_workers([40], private_mib=400)) is None  # 10% of its private memory: its own, mostly
    c_memory = copies_finding(_workers([40, 40], python_share=0.1))
    assert c_memory is not None and "writes after the fork into memory the parent filled" in c_memory.summary


def test_the_labs_words_where_no_setting_removed_the_copies():
    reads = copies_remain(92 * MiB, FrozenCopies(92 * MiB, 91 * MiB))
    assert "no setting removes them, as they are the workers' reads" in reads and "numpy or Arrow" in reads
    assert "freezes the collector" in copies_remain(92 * MiB, None)
    assert "its writes were most of them" in copies_remain(92 * MiB, FrozenCopies(92 * MiB, 5 * MiB))


def test_the_labs_words_beside_a_recommendation():
    """A recommended setting that saved something else (freeze-at-fork saving the modules' pages the workers'
    collections wrote, 10 MiB of 88 here once) leaves the reads' copies: said all the same; where the frozen
    collector removed the copies and is the recommendation, nothing remains to say."""
    freeze = "glibc:gc=freeze-at-fork"
    reads = copies_remain(92 * MiB, FrozenCopies(92 * MiB, 91 * MiB, freeze), chosen=freeze)
    assert "no setting removes them, as they are the workers' reads" in reads and "numpy or Arrow" in reads
    assert copies_remain(92 * MiB, FrozenCopies(92 * MiB, 5 * MiB, freeze), chosen=freeze) == ""
    assert "did not qualify" in copies_remain(92 * MiB, FrozenCopies(92 * MiB, 5 * MiB, freeze), chosen="glibc")
