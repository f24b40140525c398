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


def test_an_allocator_found_in_a_librarys_code_is_present_not_holding_memory():
    # Built by hand as the PyTorch process had it (issue 31: libnvshmem_host.so.3 embeds a mimalloc under
    # the prefix "nvshme"; the captured maps in fixtures/torch-2.11-cuda13/ come without the ELF files
    # detection reads): glibc serves malloc, and nothing of the mimalloc was read
    from memgap.documents.allocator import FoundAllocator

    lib = "/opt/torch/nvidia/nvshmem/lib/libnvshmem_host.so.3"
    found = [FoundAllocator("glibc", "/usr/lib/x86_64-linux-gnu/libc.so.6", serves_malloc=True),
             FoundAllocator("mimalloc", lib, "nvshme", "its API under a prefix: nvshmemi_mi_malloc, ...")]
    rss = 1589 * MiB
    layers = {"other_anon": Layer("other_anon", 110 * MiB), "files": Layer("files", rss - 110 * MiB)}

    def finding(gdb):
        snap = Snapshot(pid=1, time=0.0, rss=rss, layers=layers, unexplained=0,
                        allocator=AllocatorInfo("glibc", found[0].library, others=["mimalloc"], found=found, gdb=gdb))
        return the_finding(diagnose(snap), "second-allocator")

    f = finding({})
    said = " ".join([f["summary"], *f["evidence"]])
    assert "mimalloc (nvshme) in libnvshmem_host.so.3" in f["summary"] and "no memory of it measured" in f["summary"]
    assert f"its code found in {lib}" in said and "whether it holds any memory is not known" in said
    assert "other_anon" not in said and "its memory is" not in said, f  # no claim on memory nobody measured
    # with its own counters read (through gdb, --deep), its memory is said to be measured
    f = finding({"mimalloc": {"committed": 8 * MiB}})
    assert "its memory read" in f["summary"] and any("its own counters read" in e for e in f["evidence"]), f
