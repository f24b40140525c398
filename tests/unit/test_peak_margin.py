"""When `memgap run` reads a tree's process again for its peak: past a margin of 8 MiB, then 10% (the
arithmetic; `run` on real C trees against each worker's own VmHWM: tests/live/test_tree_run.py)."""
import math

MiB = 1 << 20


def test_a_peak_is_read_again_only_past_its_margin():
    from memgap.record.tree_watch import PEAK_STEP, PEAK_STEP_MIN, peak_due

    assert peak_due(None, 0)  # first sight
    assert not peak_due(20 * MiB, 20 * MiB + PEAK_STEP_MIN - 1) and peak_due(20 * MiB, 20 * MiB + PEAK_STEP_MIN)
    big = 500 * MiB
    assert not peak_due(big, big + int(PEAK_STEP * big) - 1) and peak_due(big, big + int(PEAK_STEP * big))
    # a process growing to 200 MiB one MiB at a time is read at most 11 + log1.1(200 / 80) times
    # on the way (first sight, every 8 MiB to 80 MiB, then every 10%), not 200
    last, reads = None, 0
    for rss in range(0, 200 * MiB + 1, MiB):
        if peak_due(last, rss):
            last, reads = rss, reads + 1
    assert 11 <= reads <= 11 + math.ceil(math.log(200 / 80, 1 + PEAK_STEP)), reads
