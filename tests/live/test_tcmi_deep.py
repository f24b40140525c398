"""``inspect --deep`` and ``--trim`` where malloc is tcmalloc or mimalloc (issue 12): their own C API
called through gdb, checked against what the process itself says, just before and just after.

The program: ``programs/own_stats.c``, holding 20 MB of 1000-byte blocks and 4 MiB of 2 MiB ones
after freeing 60 MB and 20 MiB, built against Debian's libtcmalloc_minimal.so.4 (and with
libtcmalloc_minimal.a linked in, stripped or not) and against libmimalloc.so.2. It prints its
allocator's own figures (MallocExtension_GetNumericProperty, mi_process_info) at start and on
each line it reads, so it also shows that it answers after memgap let go.

tcmalloc runs with ``TCMALLOC_RELEASE_RATE=0``: by default it gives free spans back a little at a
time as spans are freed, and the figures compared would move under the test.
"""
import json
import subprocess

import pytest

from helpers import MiB, OwnFigures, memgap, vmrss

TCMALLOC_FIGURES = {  # memgap's name -> the property the program prints
    "allocated": "generic.current_allocated_bytes", "heap_size": "generic.heap_size",
    "pageheap_free": "tcmalloc.pageheap_free_bytes", "pageheap_unmapped": "tcmalloc.pageheap_unmapped_bytes",
    "central_cache_free": "tcmalloc.central_cache_free_bytes",
    "transfer_cache_free": "tcmalloc.transfer_cache_free_bytes",
    "thread_cache_free": "tcmalloc.thread_cache_free_bytes", "total_physical": "generic.total_physical_bytes"}


@pytest.fixture
def started(own_stats_exe):
    programs = []

    def start(kind, **env):
        program = OwnFigures(own_stats_exe(kind), **env)
        programs.append(program)
        return program
    yield start
    for program in programs:
        program.close()


def _near(ours, theirs, share=0.05):
    return abs(ours - theirs) <= share * theirs


def _deep(pid):
    proc = memgap("inspect", str(pid), "--deep", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _named_share(doc):
    """The share of RSS the with-allocator layers name (other_anon is what no one claimed)."""
    layers = doc["deep"]["with_allocator"]["layers"]
    named = sum(v["resident"] or 0 for k, v in layers.items() if k != "other_anon")
    return named / doc["deep"]["with_allocator"]["rss"]


@pytest.mark.parametrize("kind", ["tcmalloc", "tcmalloc-static"])
def test_deep_reads_tcmalloc_as_the_program_does(started, kind):
    program = started(kind, TCMALLOC_RELEASE_RATE="0")
    doc = _deep(program.proc.pid)
    later = program.figures()
    deep = doc["deep"]
    assert deep["routes"] == ["outside", "gdb MallocExtension"], deep["notes"]
    t = deep["tcmalloc"]
    for ours, theirs in TCMALLOC_FIGURES.items():
        for figures in (program.first, later):  # the program's own, just before and just after memgap's read
            assert _near(t[ours], figures[theirs]), (ours, t[ours], program.first, later)
    # what the program freed: 60 MB of small blocks and 20 MiB of large ones, back in the page heap
    assert t["pageheap_free"] >= 60 * MiB and t["allocated"] >= 20 * MiB and t["thread_cache_max"] > 0
    layers = deep["with_allocator"]["layers"]
    assert layers["allocator_in_use"]["resident"] == t["allocated"]  # not clamped: its pages are there
    assert layers["allocator_free"]["detail"]["releasable"] == t["pageheap_free"]
    assert layers["other_anon"]["resident"] <= 0.10 * doc["rss"], {k: v["resident"] for k, v in layers.items()}
    assert _named_share(doc) >= 0.90
    assert deep["gdb_seconds"]["held"] < 2.0, deep["gdb_seconds"]
    print(f"{kind}: memgap / program: " + ", ".join(f"{k} {t[k]} / {later[v]}" for k, v in TCMALLOC_FIGURES.items())
          + f"; named {_named_share(doc):.1%} of RSS {doc['rss']}; gdb {deep['gdb_seconds']}")
    text = memgap("inspect", str(program.proc.pid), "--deep")
    assert text.returncode == 0, text.stderr[-2000:]
    flat = " ".join(text.stdout.split())
    assert "tcmalloc (gdb MallocExtension)" in flat and "allocator layers from gdb MallocExtension" in flat
    assert program.figures()[TCMALLOC_FIGURES["pageheap_free"]] == later[TCMALLOC_FIGURES["pageheap_free"]]


def test_trim_releases_tcmalloc_free_spans_and_measures_it(started):
    program = started("tcmalloc", TCMALLOC_RELEASE_RATE="0")
    rss_before = vmrss(program.proc.pid)
    proc = memgap("inspect", str(program.proc.pid), "--trim", "--json", "-")
    rss_after = vmrss(program.proc.pid)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trim = json.loads(proc.stdout)["after_trim"]["trim"]
    assert trim["performed"] and trim["route"] == "gdb" and trim["call"] == "MallocExtension_ReleaseFreeMemory()"
    assert trim["estimate_route"] == "gdb MallocExtension"
    # what VmRSS says, read by the test around memgap's run, and what memgap measured around the call
    assert trim["released"] >= 60 * MiB and abs(trim["released"] - (rss_before - rss_after)) <= MiB, \
        (trim, rss_before, rss_after)
    assert abs(trim["released"] - trim["estimate"]) <= 0.05 * trim["estimate"], trim
    after = program.figures()  # and the program answers
    free, unmapped = TCMALLOC_FIGURES["pageheap_free"], TCMALLOC_FIGURES["pageheap_unmapped"]
    assert after[free] == 0 and after[unmapped] == program.first[free], (program.first, after)
    assert trim["own_after"]["pageheap_unmapped"] == after[unmapped]
    assert after[TCMALLOC_FIGURES["allocated"]] == trim["own_after"]["allocated"]
    print(f"tcmalloc trim: estimate {trim['estimate']}, released {trim['released']} (VmRSS by the test "
          f"{rss_before} -> {rss_after}); gdb {trim['gdb_seconds']}")


def test_deep_and_trim_refuse_a_stripped_static_tcmalloc(own_stats_exe, tmp_path):
    """Linked in and stripped, tcmalloc's C API is in neither .dynsym nor .symtab: one line, exit code 5."""
    stripped = str(tmp_path / "own_stats-stripped")
    subprocess.run(["cp", own_stats_exe("tcmalloc-static"), stripped], check=True)
    subprocess.run(["strip", stripped], check=True)
    program = OwnFigures(stripped, TCMALLOC_RELEASE_RATE="0")
    try:
        before = program.figures()  # after its first print (which allocates stdout's buffer)
        for option in ("--deep", "--trim"):
            proc = memgap("inspect", str(program.proc.pid), option)
            assert proc.returncode == 5, (proc.returncode, proc.stderr)
            assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("memgap: "), proc.stderr
            assert "no MallocExtension_GetNumericProperty" in proc.stderr and "stripped" in proc.stderr
        assert program.figures() == before  # nothing ran in it
    finally:
        program.close()


def test_deep_reads_mimalloc_committed_memory_as_the_program_does(started):
    program = started("mimalloc")
    doc = _deep(program.proc.pid)
    later = program.figures()
    deep = doc["deep"]
    assert deep["routes"] == ["outside", "gdb mi_process_info"], deep["notes"]
    m = deep["mimalloc"]
    for name in ("current_commit", "peak_commit", "current_rss", "peak_rss"):
        for figures in (program.first, later):
            assert _near(m[name], figures[name]), (name, m[name], program.first, later)
    assert m["current_commit"] >= 64 * MiB
    layers = deep["with_allocator"]["layers"]
    for name in ("allocator_in_use", "allocator_free"):  # mimalloc 2.0 counts no allocated bytes: said, not guessed
        assert layers[name]["resident"] is None and "counts no allocated bytes" in layers[name]["note"]
    held = layers["allocator_held"]
    assert held["source"] == "gdb mi_process_info" and held["virtual"] == m["current_commit"]
    assert held["resident"] <= m["current_commit"]
    assert layers["other_anon"]["resident"] <= 0.10 * doc["rss"], {k: v["resident"] for k, v in layers.items()}
    assert _named_share(doc) >= 0.90
    assert deep["gdb_seconds"]["held"] < 2.0, deep["gdb_seconds"]
    print(f"mimalloc: memgap / program: commit {m['current_commit']} / {later['current_commit']}; held "
          f"{held['resident']} of RSS {doc['rss']} (named {_named_share(doc):.1%}); gdb {deep['gdb_seconds']}")
    text = memgap("inspect", str(program.proc.pid), "--deep")
    assert text.returncode == 0, text.stderr[-2000:]
    flat = " ".join(text.stdout.split())
    assert "mimalloc (gdb mi_process_info)" in flat and "C allocator held (in use + free)" in flat
    assert program.figures()["current_commit"] == later["current_commit"]  # memgap's read moved nothing


def test_trim_collects_mimalloc_and_measures_it(started):
    program = started("mimalloc")
    rss_before = vmrss(program.proc.pid)
    proc = memgap("inspect", str(program.proc.pid), "--trim", "--json", "-")
    rss_after = vmrss(program.proc.pid)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trim = json.loads(proc.stdout)["after_trim"]["trim"]
    assert trim["performed"] and trim["call"] == "mi_collect(true)" and trim["estimate"] is None
    # mi_collect gives back the 32 MiB segment the program emptied
    assert trim["released"] >= 24 * MiB and abs(trim["released"] - (rss_before - rss_after)) <= MiB, \
        (trim, rss_before, rss_after)
    after = program.figures()
    assert trim["own_after"]["current_commit"] == after["current_commit"] < program.first["current_commit"]
    drop = program.first["current_commit"] - after["current_commit"]
    assert drop >= trim["released"] - MiB, (drop, trim)
    print(f"mimalloc trim: released {trim['released']} (VmRSS by the test {rss_before} -> {rss_after}), "
          f"committed fell {drop}; gdb {trim['gdb_seconds']}")


def test_tiny_gdb_timeouts_leave_the_tcmalloc_program_as_it_was(started):
    """Timeouts that cut gdb short before, around and during the calls: the program answers after
    each, and what it holds is what it held (memgap's page unmapped, or said to stay)."""
    program = started("tcmalloc", TCMALLOC_RELEASE_RATE="0")
    before = program.figures()  # after its first print (which allocates stdout's buffer)
    cut, maps, stays = [], [], False
    # on the 2-core machine, shared, gdb is set up by 0.1-0.2 s and done by 0.2-0.35 s: these cut it at each step
    for limit in ("0.12", "0.18", "0.25", "0.32"):
        proc = memgap("inspect", str(program.proc.pid), "--deep", "--gdb-timeout", limit)
        if proc.returncode:
            assert proc.returncode == 1 and "did not finish" in proc.stderr, (proc.returncode, proc.stderr)
            cut.append(proc.stderr.split("did not finish ")[1].split(" in PID")[0])
        stays = stays or "stays mapped" in proc.stdout + proc.stderr
        assert program.figures() == before, limit
        with open(f"/proc/{program.proc.pid}/maps") as fh:
            maps.append(sum(1 for _ in fh))
    assert len(set(maps)) == 1 or stays, maps  # memgap's page went again each time, or it said so
    print(f"gdb cut short at: {cut}")
