"""A finding on a snapshot built by hand, where no program can make the case on demand: an unexplained
remainder below zero. Every finding on a real program that triggers it: tests/live/test_findings.py."""

from helpers import MiB, codes, figures, the_finding
from memgap.diagnose.findings import diagnose
from memgap.documents.allocator import AllocatorInfo
from memgap.documents.snapshot import Layer, Snapshot


def test_unexplained_below_zero_is_a_finding_too():
    # Built by hand: a negative remainder needs memory freed between memgap's pagemap walk
    # and its VmRSS read, a race no program can hit on demand (a PROT_NONE mapping only ever
    # adds). The rule takes the absolute value; this checks it does, and prints the sign.
    rss = 100 * MiB

    def snap(unexplained):
        layers = {"other_anon": Layer("other_anon", rss - unexplained)}
        return Snapshot(pid=1, time=0.0, rss=rss, layers=layers, unexplained=unexplained, allocator=AllocatorInfo())

    f = the_finding(diagnose(snap(-6 * MiB)), "unexplained")
    assert figures(f["summary"]) == [-6.0, -6.0], f  # -6.0 MiB, -6% of RSS
    assert "unexplained" not in codes(diagnose(snap(-4 * MiB)))  # under 5% of 100 MiB
    assert "unexplained" not in codes(diagnose(snap(4 * MiB)))
