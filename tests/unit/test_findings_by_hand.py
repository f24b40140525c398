"""A finding on a snapshot built by hand, where no program can make the case on demand: an unexplained
remainder below zero. Every finding on a real program that triggers it: tests/live/test_findings.py."""
import re

from helpers import MiB
from memgap.diagnose.findings import diagnose
from memgap.documents.allocator import AllocatorInfo
from memgap.documents.snapshot import Layer, Snapshot

FIGURES = re.compile(r"(-?\d+(?:\.\d+)?)")


def figures(text):
    """The numbers in a line of text, in order."""
    return [float(x) for x in FIGURES.findall(text)]


def the_finding(findings, code):
    """The one finding with this code (a Finding or its dict)."""
    found = [f for f in findings if (f["code"] if isinstance(f, dict) else f.code) == code]
    assert len(found) == 1, (code, findings)
    f = found[0]
    return f if isinstance(f, dict) else f.__dict__


def codes(findings):
    return {f["code"] if isinstance(f, dict) else f.code for f in findings}


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
