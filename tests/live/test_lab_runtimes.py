"""A runtime's own settings as lab variants (Go's GOGC and GOMEMLIMIT, the JVM's options through
JAVA_TOOL_OPTIONS, Node's through NODE_OPTIONS): the specs, the environment they make, what the
default set adds for a runtime, and the lab on unmodified Go and Java programs
(tests/programs/rtlab: they know nothing of memgap, and say their own VmRSS at the end of their rest)."""
import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import HERE, child_env
from helpers import memgap
from memgap.allocators.variants import COST_ENV, parse_variant
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.documents.snapshot import Finding
from memgap.errors import UsageError
from memgap.lab.choose import RUNTIME_FINDINGS, add_choices, choose, run_runtimes
from memgap.lab.remedy_lines import recommendation_lines
from memgap.report.remedy import remedy_forms
from memgap.runtimes import runtime_variants

MiB = 1 << 20
PROGRAMS = Path(HERE) / "programs" / "rtlab"
GO = shutil.which("go") or "/usr/local/go/bin/go"
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
    ("ruby:gc=1", "variant 'ruby:gc=1': unknown allocator or runtime 'ruby' (choose from glibc, jemalloc, tcmalloc, "
                  "mimalloc, go, jvm, node)"),
])
def test_a_bad_setting_is_refused_in_one_line(spec, message):
    with pytest.raises(UsageError) as raised:
        parse_variant(spec)
    assert str(raised.value) == message and "\n" not in message


def test_the_lab_refuses_a_bad_setting_before_any_run(tmp_path):
    marker = tmp_path / "ran"
    proc = memgap("lab", "--variant", "go:memlimit=lots", "--dir", str(tmp_path / "runs"), "--",
                  "touch", str(marker))
    assert proc.returncode == 2 and not marker.exists()
    assert proc.stderr.strip().splitlines()[-1].endswith("memlimit=lots: a byte count, or with Go's units B, KiB, "
                                                         "MiB, GiB, TiB (256MiB), or off")


@pytest.mark.skipif(shutil.which("java") is None, reason="no java (scripts/setup.sh installs a JDK)")
def test_the_jvm_itself_refuses_what_the_spec_refuses_and_takes_what_it_takes():
    """The witness for the free-ratio rule: the JVM, given the options through the variable the variant sets."""
    def java(tool_options):
        return subprocess.run(["java", "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True,
                              env=child_env(JAVA_TOOL_OPTIONS=tool_options), timeout=60)

    refused = java("-XX:MaxHeapFreeRatio=30")  # what jvm:maxheapfreeratio=30 alone would set
    assert refused.returncode != 0 and "MinHeapFreeRatio" in refused.stdout + refused.stderr
    taken = java(parse_variant("jvm:maxheapfreeratio=30,minheapfreeratio=10,gc=serial").env({})["JAVA_TOOL_OPTIONS"])
    assert taken.returncode == 0, taken.stderr
    rows = [line.split() for line in taken.stdout.splitlines()]
    flags = {row[1]: row[3] for row in rows if len(row) >= 4 and row[2] == "="}
    assert (flags["MaxHeapFreeRatio"], flags["MinHeapFreeRatio"], flags["UseSerialGC"]) == ("30", "10", "true")


@pytest.mark.skipif(shutil.which("node") is None, reason="no node (scripts/setup.sh installs nodejs)")
def test_node_takes_its_settings_from_node_options():
    env = parse_variant("node:max_old_space_size=200,semi_space=2").env({})
    script = ("const v8 = require('v8'); const s = v8.getHeapSpaceStatistics().find(x => x.space_name === 'new_space');"
              "console.log(v8.getHeapStatistics().heap_size_limit, s.space_size)")
    out = subprocess.run(["node", "-e", script], env=child_env(**env), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    limit, new_space = map(int, out.stdout.split())
    default = subprocess.run(["node", "-e", script], env=child_env(NODE_OPTIONS=""), capture_output=True, text=True,
                             timeout=60)
    default_limit = int(default.stdout.split()[0])
    # V8's ceiling is the old space plus the young generation: 200 MiB and a few more, far under its default
    assert 200 * MiB <= limit < 240 * MiB < default_limit
    assert new_space <= 2 * MiB


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


def test_the_baselines_first_run_adds_the_runtimes_variants_right_after_it():
    """The runner's wiring: the runtimes its snapshots read, and its peak, reach the choice."""
    from memgap.documents.records import RunFigures, RunStatus
    from memgap.lab import runner
    from memgap.lab.fork_probe import ForkProbe

    events = []

    class Events:
        def write(self, event):
            events.append(event)

    options = runner.LabOptions(["prog"], [parse_variant("glibc"), parse_variant("glibc:arena_max=2")], choose=True)
    layer = {"resident": 200 * MiB, "detail": {"runtimes": [{"runtime": "go", "retained": 180 * MiB}]}}
    finding = {"code": "runtime-heap-retained", "severity": "warning", "summary": "the go heap holds 180 MiB free",
               "evidence": [], "remedy": ""}
    run = RunDocument([ProcessRecord(1, [{"phase": "quiet", "layers": {"runtime_heap": layer}, "findings": [finding],
                                          "allocator": {"name": "unknown"}}])])
    first = RunFigures(variant="glibc", rep=1, order=1, status=RunStatus.OK, peak=320 * MiB)
    lines = []
    runner._follow_findings(options, run, first, ForkProbe(), Events(), lines.append)
    assert [v.spec for v in options.variants] == ["glibc", "go:gogc=50", "go:memlimit=240MiB", "glibc:arena_max=2"]
    assert lines == ["added go:gogc=50: chosen because: finding runtime-heap-retained: the go heap holds 180 MiB free",
                     "added go:memlimit=240MiB: chosen because: finding runtime-heap-retained: the go heap holds 180 "
                     "MiB free"]
    assert events[0]["added"] == ["go:gogc=50", "go:memlimit=240MiB"]


def test_the_lab_and_the_variants_name_no_runtime():
    """Issue 24's rule: a runtime's name is its own modules' and the registry's; the lab asks the registry."""
    src = Path(HERE).parent / "src" / "memgap"
    named = []
    for path in [*sorted((src / "lab").glob("*.py")), src / "variants.py", src / "allocators.py"]:
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


# ---- live: the lab on unmodified programs ----

@pytest.fixture(scope="session")
def go_program(tmp_path_factory):
    """programs/rtlab/grow_drop.go built (Go: /usr/local/go/bin or PATH; scripts/setup.sh installs one)."""
    if not os.path.exists(GO):
        pytest.skip("no Go toolchain (scripts/setup.sh installs golang-go)")
    out = tmp_path_factory.mktemp("go") / "grow_drop"
    env = child_env(CGO_ENABLED="0")
    if not (env.get("GOCACHE") or env.get("HOME") or env.get("XDG_CACHE_HOME")):  # go needs a build cache
        env["GOCACHE"] = str(tmp_path_factory.getbasetemp() / "gocache")
    subprocess.run([GO, "build", "-o", str(out), str(PROGRAMS / "grow_drop.go")], check=True, env=env, timeout=300,
                   cwd=str(out.parent))
    return str(out)


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory):
    """programs/rtlab/GrowDrop.java compiled (javac: scripts/setup.sh installs a JDK)."""
    if shutil.which("javac") is None:
        pytest.skip("no javac (scripts/setup.sh installs a JDK)")
    out = tmp_path_factory.mktemp("java")
    subprocess.run(["javac", "-d", str(out), str(PROGRAMS / "GrowDrop.java")], check=True, timeout=120)
    return str(out)


def _lab(tmp_path, variants, cmd):
    """``memgap lab --reps 2`` of ``cmd`` (which appends its own VmRSS to the witness file at the end of its
    rest); returns the lab document, each run's witness (bytes, in run order) and the run folders."""
    out, runs = tmp_path / "lab.json", tmp_path / "runs"
    args = ["lab", "--reps", "2", "--max-slowdown", "3", "--json", str(out), "--dir", str(runs)]
    for v in variants:
        args += ["--variant", v]
    proc = memgap(*args, "--", *cmd, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads(out.read_text())
    witness = [int(line.split("=")[1]) * 1024 for line in (tmp_path / "own.txt").read_text().split()]
    return lab, witness, runs


def _run_env(runs, order):
    """The environment the lab gave its ``order``-th run, as the run's recording keeps it."""
    folder = next(runs.glob(f"run-{order:03d}-*"))
    return json.loads((folder / "samples.jsonl").read_text().splitlines()[0])["env"]


def _check_runs(lab, witness, variants, gives_back_at_rest=False):
    """Each run at rest, its idle against the program's own VmRSS at the end of its rest. Where the runtime
    gives pages back during the rest on its own (``gives_back_at_rest``: Go's background scavenger, 7.4 MiB
    under a limit once, 116 MiB of a 322 MiB baseline another time in a fresh clone), the program's figure
    is a floor the lab's idle, read as the rest began, may stand above."""
    assert lab["complete"] and lab["order"] == [f"{v}#{rep}" for rep in (1, 2) for v in variants]
    assert len(witness) == len(lab["runs"])
    for r, own in zip(lab["runs"], witness, strict=True):
        assert r["status"] == "ok", r
        assert "quiet" in r["idle_rule"], r["idle_rule"]  # found at rest: the program marks nothing
        room = max(0.05 * own, 4 * MiB)
        if gives_back_at_rest:
            assert own - room <= r["idle"] <= 1.7 * own + room, (r["variant"], r["idle"], own)
        else:
            assert abs(r["idle"] - own) <= room, (r["variant"], r["idle"], own)
    return {s["spec"]: s["idle"][0] for s in lab["variants"]}


def test_the_lab_ranks_gos_own_settings_on_an_unmodified_go_program(tmp_path, go_program):
    """GOGC=25: the heap grows a quarter over the live one, not double, before each collection; GOMEMLIMIT
    under the live peak: collections all along, and the free pages given back at once (the background
    scavenger leaves pages alone for a cycle after they were dense). Measured (2 cores): idle 333 MiB
    under the defaults, 234 with GOGC=25, 29 with GOMEMLIMIT=100MiB (x2.4 the time)."""
    variants = ["glibc", "go:gogc=25", "go:memlimit=100MiB"]
    lab, witness, runs = _lab(tmp_path, variants, [go_program, "200", "2", "gc", str(tmp_path / "own.txt")])
    idle = _check_runs(lab, witness, variants, gives_back_at_rest=True)
    assert idle["glibc"] > 200 * MiB  # the retention the settings are for
    assert idle["go:gogc=25"] < 0.85 * idle["glibc"]
    assert idle["go:memlimit=100MiB"] < 0.5 * idle["glibc"]
    assert lab["recommendation"]["variant"] in variants[1:]
    assert set(lab["recommendation"]["env"]) <= {"GOGC", "GOMEMLIMIT"}
    assert "GOGC" not in _run_env(runs, 1) and _run_env(runs, 2)["GOGC"] == "25"  # the baseline's, and gogc=25's


@pytest.mark.skipif(shutil.which("java") is None, reason="no java (scripts/setup.sh installs a JDK)")
def test_the_lab_ranks_the_jvms_own_settings_on_an_unmodified_java_program(tmp_path, java_classes):
    """G1 after one System.gc() keeps up to 70% of its heap free; 30% (with a lower minimum, as the JVM
    asks) shrinks it further; -Xmx256m, added by the variant and not the baseline, caps what it grew to.
    Measured (OpenJDK 17, 2 cores): idle 143 MiB under the defaults, 80 and 115."""
    variants = ["glibc", "jvm:maxheapfreeratio=30,minheapfreeratio=10", "jvm:xmx=256m"]
    lab, witness, runs = _lab(tmp_path, variants, ["java", "-cp", java_classes, "GrowDrop", "200", "2", "gc",
                                                   str(tmp_path / "own.txt")])
    idle = _check_runs(lab, witness, variants)
    assert idle["jvm:maxheapfreeratio=30,minheapfreeratio=10"] < 0.75 * idle["glibc"]
    assert idle["jvm:xmx=256m"] < 0.9 * idle["glibc"]
    assert lab["recommendation"]["variant"] in variants[1:]
    assert "JAVA_TOOL_OPTIONS" not in _run_env(runs, 1)  # the baseline (run 1) has no -Xmx of ours
    assert _run_env(runs, 3)["JAVA_TOOL_OPTIONS"].endswith("-Xmx256m")  # run 3: jvm:xmx=256m's first
