"""A runtime's own settings as lab variants (Go's GOGC and GOMEMLIMIT, the JVM's options through
JAVA_TOOL_OPTIONS, Node's through NODE_OPTIONS), where nothing is started: the specs, the environment
they make, what the default set adds for a runtime a run read, and the remedy lines. The runtimes
themselves taking them, and the lab on unmodified Go and Java programs: tests/live/test_lab_runtimes.py."""
import ast
from pathlib import Path

import pytest

from conftest import HERE
from memgap.allocators.variants import COST_ENV, parse_variant
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.documents.snapshot import Finding
from memgap.errors import UsageError
from memgap.lab.choose import RUNTIME_FINDINGS, add_choices, choose, run_runtimes
from memgap.lab.remedy_lines import recommendation_lines
from memgap.report.remedy import remedy_forms
from memgap.runtimes import runtime_variants

MiB = 1 << 20
RUNTIME_NAMES = {"go", "jvm", "v8", "node"}


def test_each_setting_becomes_the_variable_its_runtime_reads_after_what_the_user_set():
    user = {"GODEBUG": "http2client=0", "JAVA_TOOL_OPTIONS": "-Dfile.encoding=UTF-8", "NODE_OPTIONS": "--trace-gc"}
    assert parse_variant("go:gogc=50").env(user) == {"GOGC": "50"}
    assert parse_variant("go:memlimit=256MiB,gogc=off").env(user) == {"GOMEMLIMIT": "256MiB", "GOGC": "off"}
    assert parse_variant("go:madvdontneed=1").env(user) == {"GODEBUG": "http2client=0,madvdontneed=1"}
    assert parse_variant("go:madvdontneed=0").env({}) == {"GODEBUG": "madvdontneed=0"}
    jvm = parse_variant("jvm:maxheapfreeratio=30,minheapfreeratio=10,periodic_gc_ms=5000")
    assert jvm.env(user) == {"JAVA_TOOL_OPTIONS": "-Dfile.encoding=UTF-8 -XX:MinHeapFreeRatio=10 "
                                                  "-XX:MaxHeapFreeRatio=30 -XX:G1PeriodicGCInterval=5000"}
    assert parse_variant("jvm:gc=serial,xms=16m,xmx=1g").env({}) == {
        "JAVA_TOOL_OPTIONS": "-XX:+UseSerialGC -Xms16m -Xmx1g"}
    assert parse_variant("node:max_old_space_size=256,semi_space=4").env(user) == {
        "NODE_OPTIONS": "--trace-gc --max-old-space-size=256 --max-semi-space-size=4"}


def test_runtime_settings_combine_with_the_allocators_and_cost_only_the_environment():
    both = parse_variant("jvm:gc=serial+glibc:arena_max=2")
    assert both.env({}) == {"JAVA_TOOL_OPTIONS": "-XX:+UseSerialGC", "MALLOC_ARENA_MAX": "2"}
    assert (both.allocator, both.cost, both.settings, both.is_baseline) == ("glibc", COST_ENV, 2, False)
    alone = parse_variant("go:gogc=50")  # glibc's malloc as it is
    assert (alone.allocator, alone.options, alone.cost, alone.settings) == ("glibc", {}, COST_ENV, 1)
    assert not alone.is_baseline and not alone.sets_malloc and both.sets_malloc
    trimmed = parse_variant("go:gogc=50+glibc:trim=idle")
    assert trimmed.trim == "idle" and trimmed.env({})["GOGC"] == "50"


@pytest.mark.parametrize(("spec", "message"), [
    ("go", "variant 'go': name a go setting (gogc, memlimit, madvdontneed)"),
    ("go:gogc=fast", "variant 'go:gogc=fast': gogc=fast: a whole number from 1 to 2147483647 or 'off'"),
    ("go:gogc=0", "variant 'go:gogc=0': gogc=0: a whole number from 1 to 2147483647 or 'off'"),
    ("go:memlimit=256MB", "variant 'go:memlimit=256MB': memlimit=256MB: a byte count, or with Go's units B, KiB, "
                          "MiB, GiB, TiB (256MiB), or off"),
    ("go:madvdontneed=yes", "variant 'go:madvdontneed=yes': madvdontneed=yes: one of 0, 1"),
    ("go:gcpercent=50", "variant 'go:gcpercent=50': go has no setting 'gcpercent' (choose from gogc, memlimit, "
                        "madvdontneed)"),
    ("go:gogc", "variant 'go:gogc': 'gogc' is not key=value"),
    ("jvm:maxheapfreeratio=30", "variant 'jvm:maxheapfreeratio=30': the JVM refuses to start with MaxHeapFreeRatio "
                                "30 below MinHeapFreeRatio 40: add minheapfreeratio=N with N at most 30 (the JVM's "
                                "default is 40)"),
    ("jvm:maxheapfreeratio=101,minheapfreeratio=1", "variant 'jvm:maxheapfreeratio=101,minheapfreeratio=1': "
                                                    "maxheapfreeratio=101: a whole number from 0 to 100"),
    ("jvm:gc=zgc", "variant 'jvm:gc=zgc': gc=zgc: one of serial, parallel, g1"),
    ("jvm:xmx=1.5g", "variant 'jvm:xmx=1.5g': xmx=1.5g: a size as the JVM reads it: bytes, or with k, m or g (256m)"),
    ("jvm:gc=serial,periodic_gc_ms=1000", "variant 'jvm:gc=serial,periodic_gc_ms=1000': periodic_gc_ms is G1's "
                                          "(G1PeriodicGCInterval): not with gc=serial"),
    ("node:semi_space=1.5", "variant 'node:semi_space=1.5': semi_space=1.5: a whole number from 1 to 1024"),
    ("go:gogc=50+go:gogc=25", "variant 'go:gogc=50+go:gogc=25': go named twice"),
    ("glibc+jemalloc", "variant 'glibc+jemalloc': one allocator per variant, not 2"),
    ("ruby:gc=1", "variant 'ruby:gc=1': unknown allocator, runtime or library 'ruby' (choose from glibc, "
                  "jemalloc, tcmalloc, mimalloc, go, jvm, node, arrow, torch)"),
])
def test_a_bad_setting_is_refused_in_one_line(spec, message):
    with pytest.raises(UsageError) as raised:
        parse_variant(spec)
    assert str(raised.value) == message and "\n" not in message


def _retained(summary="the go heap holds 180 MiB free but resident around 20 MiB of live objects"):
    return Finding("runtime-heap-retained", "warning", summary, ["go 1.26: heap resident 200 MiB"], "r")


def test_a_runtime_heap_finding_adds_that_runtimes_variants_with_the_finding_as_reason():
    got = choose([_retained()], {"unknown"}, python=False, runtimes={"go"}, peak=400 * MiB)
    assert [c.spec for c in got] == ["go:gogc=50", "go:memlimit=300MiB"] == list(runtime_variants("go", 400 * MiB))
    assert {c.reason for c in got} == {"finding runtime-heap-retained: the go heap holds 180 MiB free but resident "
                                       "around 20 MiB of live objects"}
    chosen = {"glibc": "the baseline"}
    assert add_choices(got, chosen) == ["go:gogc=50", "go:memlimit=300MiB"]
    assert chosen["go:gogc=50"].startswith("chosen because: finding runtime-heap-retained: the go heap holds")
    for choice in got:  # each one parses, and sets only the environment
        assert parse_variant(choice.spec).cost == COST_ENV


def test_a_runtime_seen_without_the_finding_gets_its_settings_and_no_runtime_gets_none():
    got = choose([], {"glibc"}, python=False, runtimes={"jvm"})
    assert [c.spec for c in got] == list(runtime_variants("jvm")) and got
    assert all(c.reason == "the workload runs on the jvm runtime: its own settings for its heap" for c in got)
    assert choose([_retained()], {"glibc"}, python=True) == []  # the finding, but no runtime's heap read
    assert [c.spec for c in choose([], set(), False, runtimes={"v8"})] == ["node:semi_space=4"]  # no peak: no limit
    assert runtime_variants("python") == ()
    assert "runtime-heap-retained" in RUNTIME_FINDINGS


def test_the_runtimes_a_run_read_come_from_its_snapshots_runtime_heap_layer():
    layer = {"resident": 1, "detail": {"runtimes": [{"runtime": "jvm", "retained": 5}]}}
    run = RunDocument([ProcessRecord(1, [{"phase": "quiet", "layers": {"runtime_heap": layer}},
                                         {"phase": "exit", "layers": {}}]),
                       ProcessRecord(2, [{"phase": "quiet"}])])
    assert run_runtimes(run) == {"jvm"}
    assert run_runtimes(RunDocument([ProcessRecord(1, [{"phase": "quiet", "layers": {"other_anon": {}}}])])) == set()


def test_the_baselines_first_run_adds_the_runtimes_variants_right_after_it(tmp_path):
    """The runner's wiring: the runtimes its snapshots read, and its peak, reach the choice; the lab's
    state takes the variants added, its journal says so."""
    from memgap.documents.records import RunFigures, RunStatus
    from memgap.lab import runner
    from memgap.lab.fork_probe import ForkProbe
    from memgap.lab.journal import Journal, journal_path
    from memgap.lab.state import LabOptions, LabState
    from memgap.record.recording import read_events

    options = LabOptions(("prog",), (parse_variant("glibc"), parse_variant("glibc:arena_max=2")), choose=True)
    state = LabState.start(options)
    layer = {"resident": 200 * MiB, "detail": {"runtimes": [{"runtime": "go", "retained": 180 * MiB}]}}
    finding = {"code": "runtime-heap-retained", "severity": "warning", "summary": "the go heap holds 180 MiB free",
               "evidence": [], "remedy": ""}
    run = RunDocument([ProcessRecord(1, [{"phase": "quiet", "layers": {"runtime_heap": layer}, "findings": [finding],
                                          "allocator": {"name": "unknown"}}])])
    first = RunFigures(variant="glibc", rep=1, order=1, status=RunStatus.OK, peak=320 * MiB)
    lines = []
    with Journal(str(tmp_path / "lab")) as journal:
        runner._follow_findings(state, run, first, ForkProbe(), journal, lines.append)
    assert [v.spec for v in state.variants] == ["glibc", "go:gogc=50", "go:memlimit=240MiB", "glibc:arena_max=2"]
    assert [v.spec for v in options.variants] == ["glibc", "glibc:arena_max=2"]  # the options stay as given
    assert lines == ["added go:gogc=50: chosen because: finding runtime-heap-retained: the go heap holds 180 MiB free",
                     "added go:memlimit=240MiB: chosen because: finding runtime-heap-retained: the go heap holds 180 "
                     "MiB free"]
    (event,) = read_events(journal_path(str(tmp_path / "lab")))
    assert event["type"] == "chosen" and event["added"] == ["go:gogc=50", "go:memlimit=240MiB"]


def test_the_lab_and_the_variants_name_no_runtime():
    """Issue 24's rule: a runtime's name is its own modules' and the registry's; the lab asks the registry."""
    src = Path(HERE).parent / "src" / "memgap"
    named = []
    for path in [*sorted((src / "lab").glob("*.py")), *sorted((src / "allocators").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RUNTIME_NAMES:
                named.append(f"{path.name}:{node.lineno} {node.value!r}")
    assert named == []


def test_the_remedy_lines_carry_the_runtimes_variables_in_every_form():
    forms = remedy_forms(recommendation_lines(parse_variant("jvm:maxheapfreeratio=30,minheapfreeratio=10"),
                                              python=False))
    value = "-XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    assert forms["env"] == {"JAVA_TOOL_OPTIONS": value} or forms["env"]["JAVA_TOOL_OPTIONS"].endswith(value)
    assert forms["shell"] == [f'JAVA_TOOL_OPTIONS="{forms["env"]["JAVA_TOOL_OPTIONS"]}"']
    assert forms["dockerfile"] == f'ENV JAVA_TOOL_OPTIONS="{forms["env"]["JAVA_TOOL_OPTIONS"]}"'
    assert forms["systemd"] == [f'Environment="JAVA_TOOL_OPTIONS={forms["env"]["JAVA_TOOL_OPTIONS"]}"']
    assert f'value: "{forms["env"]["JAVA_TOOL_OPTIONS"]}"' in forms["kubernetes"]
    assert forms["setup"] == [] and any("JAVA_TOOL_OPTIONS" in note for note in forms["notes"])
    go = remedy_forms(recommendation_lines(parse_variant("go:gogc=50"), python=False))
    assert (go["shell"], go["systemd"], go["dockerfile"]) == (["GOGC=50"], ['Environment="GOGC=50"'], "ENV GOGC=50")


def test_arrows_pool_settings_become_the_variables_libarrow_and_its_mimalloc_read():
    assert parse_variant("arrow:pool=system").env({}) == {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert parse_variant("arrow:purge_delay=0,allow_thp=0").env({}) == {"MIMALLOC_PURGE_DELAY": "0",
                                                                       "MIMALLOC_ALLOW_THP": "0"}
    assert parse_variant("arrow:purge_delay=-1").env({}) == {"MIMALLOC_PURGE_DELAY": "-1"}
    assert parse_variant("arrow:pool=jemalloc+glibc:arena_max=2").env({}) == {
        "ARROW_DEFAULT_MEMORY_POOL": "jemalloc", "MALLOC_ARENA_MAX": "2"}
    with pytest.raises(UsageError, match="pool=tcmalloc: one of mimalloc, jemalloc, system"):
        parse_variant("arrow:pool=tcmalloc")
    with pytest.raises(UsageError, match="purge_delay=-2: milliseconds"):
        parse_variant("arrow:purge_delay=-2")


def test_torchs_cache_settings_set_both_variables_after_what_the_user_set():
    """torch >= 2.9 reads PYTORCH_ALLOC_CONF (and PYTORCH_CUDA_ALLOC_CONF only where it is unset), older ones
    PYTORCH_CUDA_ALLOC_CONF: both get the user's settings torch 2.11 would read, then the variant's."""
    both = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
    assert parse_variant("torch:expandable_segments=True").env({}) == dict.fromkeys(both, "expandable_segments:True")
    assert parse_variant("torch:garbage_collection_threshold=0.6,max_split_size_mb=128").env({}) == dict.fromkeys(
        both, "garbage_collection_threshold:0.6,max_split_size_mb:128")
    user = {"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:4", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert parse_variant("torch:expandable_segments=True").env(user) == dict.fromkeys(
        both, "roundup_power2_divisions:4,expandable_segments:True")
    older = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert parse_variant("torch:roundup_power2_divisions=8").env(older) == dict.fromkeys(
        both, "max_split_size_mb:64,roundup_power2_divisions:8")
    assert parse_variant("torch:expandable_segments=True+glibc:arena_max=2").env({}) == {
        **dict.fromkeys(both, "expandable_segments:True"), "MALLOC_ARENA_MAX": "2"}
    assert parse_variant("torch:expandable_segments=True").cost == COST_ENV


@pytest.mark.parametrize("spec, wrong", [
    ("torch:expandable_segments=true", "expandable_segments=true: one of True, False"),
    ("torch:garbage_collection_threshold=1", "garbage_collection_threshold=1: a fraction between 0 and 1"),
    ("torch:garbage_collection_threshold=0", "a fraction between 0 and 1"),
    ("torch:max_split_size_mb=20", "max_split_size_mb=20: MiB: a whole number over 20"),
    ("torch:roundup_power2_divisions=6", "roundup_power2_divisions=6: a power of two"),
    ("torch:roundup_power2_divisions=0", "a power of two"),
    ("torch:backend=cudaMallocAsync", "torch has no setting 'backend'"),
    ("torch:", "name a torch setting"),
])
def test_a_bad_torch_setting_is_refused_before_any_run(spec, wrong):
    with pytest.raises(UsageError, match=wrong):
        parse_variant(spec)


def test_torchs_remedy_lines_set_both_variables_and_say_what_they_change():
    forms = remedy_forms(recommendation_lines(parse_variant("torch:expandable_segments=True"), python=True))
    assert forms["env"] == {"PYTORCH_ALLOC_CONF": "expandable_segments:True",
                            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert forms["shell"] == ["PYTORCH_ALLOC_CONF=expandable_segments:True",
                              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    assert forms["setup"] == []
    assert any("PYTORCH_CUDA_ALLOC_CONF only where it is unset" in note for note in forms["notes"])
    assert any("the GPU's memory, not RSS" in note for note in forms["notes"])


def test_a_library_found_with_its_own_allocator_adds_its_pool_settings():
    """What the baseline's snapshots found (an allocator beside malloc's, in libarrow) adds Arrow's pool
    settings; a library with no settings module adds nothing."""
    from memgap.lab.choose import run_libraries

    found = [{"name": "glibc", "library": "/lib/libc.so.6", "serves_malloc": True},
             {"name": "mimalloc", "library": "/venv/pyarrow/libarrow.so.2600", "prefix": "arrow_",
              "serves_malloc": False}]
    run = RunDocument([ProcessRecord(1, [{"phase": "quiet", "allocator": {"name": "glibc", "found": found}}])])
    assert run_libraries(run) == {"/venv/pyarrow/libarrow.so.2600"}
    got = choose([], {"glibc"}, python=True, libraries=run_libraries(run))
    assert [c.spec for c in got] == ["arrow:pool=system", "arrow:pool=jemalloc", "arrow:purge_delay=0",
                                     "arrow:allow_thp=0"]
    assert all(c.reason.startswith("libarrow.so.2600 bundles its own allocator") for c in got)
    assert choose([], {"glibc"}, python=True, libraries={"/usr/lib/librjem.so"}) == []


def test_the_fork_probe_judges_a_trees_quiet_by_its_run_queue_waits_too():
    """The fork probe's look at a tree carries its threads' waits on a run queue to its quiet spell,
    as a run's process's does (QuietSpell's WANTED_SHARE): read from this process, a tree of one."""
    import os

    from memgap.lab.fork_probe import _tree_state
    from memgap.sources.procfs import ProcReader

    own = ProcReader(os.getpid())
    before = own.run_delay()
    processes, _, rss, waited = _tree_state(os.getpid())
    assert processes == 1 and rss > 0
    assert 0 < before <= waited <= own.run_delay(), (before, waited)  # this process has waited on a run queue
