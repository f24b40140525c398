"""The findings on jemalloc's and tcmalloc's free memory (their readers' ``findings``, in
src/memgap/allocators/jemalloc.py and tcmalloc.py), from the figures
``inspect --deep`` reads through gdb: each on a real program that triggers it, its figures against the
program's own count and against a real purge or release measured by VmRSS, and the same program under
the finding's floor, where it must not fire.

The programs are those the deep tests build: ``programs/je_stats.c`` with a je_-prefixed jemalloc
beside glibc (conftest's ``je_prefixed_exe``; its arguments scale the blocks and make retained address
space) and ``programs/own_stats.c`` under tcmalloc (an argument divides its amounts), run with
``TCMALLOC_RELEASE_RATE=0`` so that tcmalloc returns nothing on its own while the test reads.
"""
import json

from helpers import MiB, OwnFigures, memgap, vmrss


def _inspect(pid, option):
    proc = memgap("inspect", str(pid), option, "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _findings(doc):
    return {f["code"]: f for f in doc["deep"]["with_allocator"]["findings"]}


def _status_kib(pid, key):
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))


def test_jemalloc_dirty_pages_a_purge_returns(je_prefixed_exe):
    program = OwnFigures(je_prefixed_exe[0], "100000")
    small = OwnFigures(je_prefixed_exe[0])
    try:
        doc = _inspect(program.proc.pid, "--deep")
        under = _inspect(small.proc.pid, "--deep")
        trim = _inspect(program.proc.pid, "--trim")["after_trim"]["trim"]
        later = program.figures()
    finally:
        program.close()
        small.close()
    first = program.first
    found = _findings(doc)
    assert set(found) == {"jemalloc-dirty"}, found  # glibc's own free share is under its floor: no glibc finding
    f = found["jemalloc-dirty"]
    dirty = first["pdirty"] * 4096  # the program's own count
    assert dirty >= 16 * MiB and f["severity"] == "warning"
    assert f"{dirty / MiB:.1f} MiB of dirty pages" in f["evidence"][0], (f, first)
    assert any("dirty_decay_ms 30000 ms" in line for line in f["evidence"]), f["evidence"]  # its malloc_conf
    assert "background_thread off" in " ".join(f["evidence"]) and "arena.4096.purge" in f["remedy"]
    # what the finding says a purge returns, a real purge returned: VmRSS and the program's own count
    jemalloc = trim["parts"]["jemalloc"]
    assert abs(jemalloc["released"] - dirty) <= 0.1 * dirty, (jemalloc, first)
    assert later["pdirty"] == 0
    # under the floor: the same program with a fifth of the blocks (5 MiB dirty) says nothing
    assert small.first["pdirty"] * 4096 < 16 * MiB and _findings(under) == {}, _findings(under)
    print(f"jemalloc-dirty: the program's dirty pages {dirty}, the purge released {jemalloc['released']}")


def test_jemalloc_retained_address_space_is_said_not_resident(je_prefixed_exe):
    program = OwnFigures(je_prefixed_exe[0], "20000", "512")
    try:
        doc = _inspect(program.proc.pid, "--deep")
        vmsize, rss = _status_kib(program.proc.pid, "VmSize"), vmrss(program.proc.pid)
    finally:
        program.close()
    f = _findings(doc)["jemalloc-retained"]
    retained = program.first["retained"]
    assert retained >= 512 * MiB and f["severity"] == "info"
    assert f"{retained / MiB:.1f} MiB of address space retained" in f["summary"] and "not in RSS" in f["summary"]
    # the kernel's witness: the address space is mapped (VmSize), the pages are not (VmRSS)
    assert vmsize >= retained > 10 * rss, (vmsize, retained, rss)
    assert "jemalloc-dirty" not in _findings(doc)
    # the default run (jemalloc's own 20 MiB retained, under the floor) is what the dirty test's small program
    # shows: no finding there either


def test_tcmalloc_page_heap_free_a_release_returns(own_stats_exe):
    exe = own_stats_exe("tcmalloc")
    program = OwnFigures(exe, TCMALLOC_RELEASE_RATE="0")
    small = OwnFigures(exe, "6", TCMALLOC_RELEASE_RATE="0")
    try:
        doc = _inspect(program.proc.pid, "--deep")
        under = _inspect(small.proc.pid, "--deep")
        before = program.figures()
        trim = _inspect(program.proc.pid, "--trim")["after_trim"]["trim"]
    finally:
        program.close()
        small.close()
    f = _findings(doc)["tcmalloc-page-heap-free"]
    free = before["tcmalloc.pageheap_free_bytes"]  # the program's own count, just after memgap's read
    assert free >= 16 * MiB and f"page heap holds {free / MiB:.1f} MiB" in f["summary"], (f, before)
    assert "ReleaseFreeMemory" in f["remedy"] and "TCMALLOC_RELEASE_RATE" in " ".join(f["evidence"])
    # a real release gives back about what the finding said (VmRSS around it)
    assert abs(trim["released"] - free) <= 0.1 * free + MiB, (trim["released"], free)
    assert small.first["tcmalloc.pageheap_free_bytes"] < 16 * MiB and _findings(under) == {}, _findings(under)
    print(f"tcmalloc-page-heap-free: the program's page heap free {free}, the release gave back {trim['released']}")
