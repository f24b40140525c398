"""The lab's pure parts: variant specs, the environment they set, metrics and the verdict."""
import json
import os
import pathlib
import re

import pytest

from conftest import FIXTURES
from memgap.allocators import variants as V  # noqa: N812 - a short alias, on most lines
from memgap.allocators.catalog import find_library
from memgap.documents.lab_summary import noise_allowance
from memgap.documents.records import RunFigures
from memgap.errors import UsageError
from memgap.lab.figures import classify_pattern
from memgap.lab.remedy_lines import recommendation_lines as remedy_lines
from memgap.lab.verdict import decide, summarize
from memgap.report.remedy import lab_with_forms, remedy_forms

MiB = 1 << 20


def test_glibc_tunables_become_their_env_vars():
    v = V.parse_variant("glibc:arena_max=2,mmap_threshold=131072,trim_threshold=65536,top_pad=0")
    assert v.env() == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
                       "MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_TOP_PAD_": "0"}
    assert v.cost == V.COST_ENV and not v.is_baseline
    assert V.parse_variant("glibc").is_baseline and V.parse_variant("glibc").env() == {}


def test_jemalloc_options_become_malloc_conf(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    v = V.parse_variant("jemalloc:background_thread=true,dirty_decay_ms=1000")
    v.library = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    env = v.env()
    assert env["MALLOC_CONF"] == "background_thread:true,dirty_decay_ms:1000"
    assert env["LD_PRELOAD"] == "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /opt/other.so"  # keeps the user's
    assert v.cost == V.COST_PRELOAD


def test_trim_and_pymalloc_options():
    assert V.parse_variant("glibc:trim=idle").env() == {"MEMGAP_TRIM_AFTER": "idle"}
    assert V.parse_variant("glibc:arena_max=2,trim=every:5").env() == {
        "MALLOC_ARENA_MAX": "2", "MEMGAP_TRIM_EVERY": "5"}
    assert V.parse_variant("glibc:pymalloc=off").env() == {"PYTHONMALLOC": "malloc"}
    assert V.parse_variant("glibc:trim=idle").cost == V.COST_TRIMMER
    assert V.parse_variant("tcmalloc:release_rate=10").env()["TCMALLOC_RELEASE_RATE"] == "10"
    assert V.parse_variant("mimalloc:purge_delay=0").env()["MIMALLOC_PURGE_DELAY"] == "0"
    frozen = V.parse_variant("jemalloc:gc=freeze-at-fork")  # Python's collector, under any allocator
    assert frozen.env()["MEMGAP_GC_FREEZE_AT_FORK"] == "1" and frozen.python_only and not frozen.is_baseline


@pytest.mark.parametrize("spec", ["nosuch", "glibc:arena_max", "glibc:arenas=2", "glibc:arena_max=two",
                                  "glibc:trim=sometimes", "glibc:trim=every:0", "jemalloc:trim=idle",
                                  "glibc:pymalloc=maybe", "glibc:=3", "glibc:gc=off"])
def test_bad_specs_are_usage_errors(spec):
    with pytest.raises(UsageError):
        V.parse_variant(spec)


def recommendation_lines(variant, python=True):
    """The recommendation as the lab document holds it: the lines, rendered."""
    return remedy_forms(remedy_lines(variant, python))


def test_recommendation_lines():
    lines = recommendation_lines(V.parse_variant("glibc:arena_max=2,mmap_threshold=131072"))
    assert lines["env"] == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072"}
    assert lines["shell"] == ["MALLOC_ARENA_MAX=2", "MALLOC_MMAP_THRESHOLD_=131072"]
    assert lines["dockerfile"].startswith("ENV MALLOC_ARENA_MAX=2 \\")
    assert lines["systemd"] == ['Environment="MALLOC_ARENA_MAX=2"', 'Environment="MALLOC_MMAP_THRESHOLD_=131072"']
    # the Kubernetes env list: each name with its value as a quoted string (read as YAML's double-quoted
    # scalars, which are JSON's strings)
    pairs = re.findall(r"^  - name: (\S+)\n    value: (\".*\")$", lines["kubernetes"], re.M)
    assert lines["kubernetes"].startswith("env:\n") and {k: json.loads(v) for k, v in pairs} == lines["env"]
    assert len(lines["kubernetes"].splitlines()) == 1 + 2 * len(pairs)
    namespace = {}
    exec(lines["python"], namespace)  # the Python it prints runs
    assert os.environ.pop("MALLOC_ARENA_MAX") == "2" and os.environ.pop("MALLOC_MMAP_THRESHOLD_") == "131072"


def test_full_tunable_names_go_through_glibc_tunables(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.perturb=0")  # the user's: kept, before the variant's
    v = V.parse_variant("glibc:glibc.malloc.arena_max=1,glibc.malloc.tcache_count=0,trim_threshold=65536")
    assert v.env() == {"MALLOC_TRIM_THRESHOLD_": "65536",
                       "GLIBC_TUNABLES": "glibc.malloc.perturb=0:glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0"}
    assert v.arena_max == 1 and V.parse_variant("glibc:arena_max=4").arena_max == 4
    with pytest.raises(UsageError, match="name one in full"):
        V.parse_variant("glibc:tcache_count=0")


def test_tunables_are_read_from_what_the_loader_lists():
    """ld.so --list-tunables as glibc 2.36 prints it (the live check against this machine's loader:
    tests/live/test_lab_this_machine.py)."""
    from memgap.sources.glibc_tunables import parse_tunables

    listed = parse_tunables((pathlib.Path(FIXTURES) / "glibc-tunables" / "list-tunables-2.36.txt").read_text())
    assert listed["glibc.malloc.arena_max"] == (1, 2**64 - 1) and listed["glibc.malloc.check"] == (0, 3)
    assert len(listed) == 34  # of 37 lines: 3 without a range (glibc.cpu.hwcaps and the like)


def test_trimmer_recommendations_for_python_and_for_other_programs():
    quiet = V.parse_variant("glibc:arena_max=2,trim=quiet")
    assert quiet.env() == {"MALLOC_ARENA_MAX": "2", "MEMGAP_TRIMMER": "1"}
    python = recommendation_lines(quiet, python=True)
    # memgap's .pth file starts the trimmer where memgap is installed: no PYTHONPATH of this machine
    assert python["env"] == {"MALLOC_ARENA_MAX": "2", "MEMGAP_TRIMMER": "1"}
    assert python["setup"] == ["pip install memgap   # into the program's own environment"]
    assert python["dockerfile"] == "RUN pip install memgap\nENV MALLOC_ARENA_MAX=2 \\\n    MEMGAP_TRIMMER=1"
    # which lines were measured is said: the trimmer was, the plain-Python equivalent was not
    assert any("plain-Python lines were not measured" in n for n in python["notes"]), python["notes"]
    # the env must apply it to an unmodified program: one that marks no idle phase for memgap
    idle = recommendation_lines(V.parse_variant("glibc:arena_max=2,trim=idle"), python=True)
    assert idle["env"] == python["env"]
    namespace = {}
    exec(idle["python_plain"], namespace)  # the dependency-free lines run (a real malloc_trim here)
    # a C program marks no phase for memgap: the idle trim becomes the agent's idle trimmer, linked
    # by a setup line to a fixed path on the target
    native = recommendation_lines(V.parse_variant("glibc:trim=idle"), python=False)
    env = native["env"]
    assert "MEMGAP_TRIM_AFTER" not in env and "PYTHONPATH" not in env
    assert env["MEMGAP_TRIMMER"] == "1" and env["MEMGAP_AGENT"] == "on"
    assert env["LD_PRELOAD"] == "/usr/local/lib/libmemgap-agent.so"
    assert native["setup"][0].startswith('ln -sf "$(memgap agent --path)" /usr/local/lib/libmemgap-agent.so')
    every = recommendation_lines(V.parse_variant("glibc:trim=every:5"), python=False)
    assert every["env"]["MEMGAP_TRIM_EVERY"] == "5" and "MEMGAP_TRIMMER" not in every["env"]
    assert "args=(5,)" in every["python_plain"]


REQUIRED = {"pid": 1, "unexplained": 0}  # what every snapshot has, which a run's are checked for


def _run(fields):
    """A run document made by hand: the fields given, the rest as an earlier memgap left them."""
    from memgap.documents.records import RunDocument

    return RunDocument.from_dict({"schema": "memgap.run/1", **fields})


def test_post_rest_is_the_exit_figure():
    snap = {"phase": "", "rss": 0, "layers": {}, "status": {}, "allocator": {"name": "glibc"}, **REQUIRED,
            "route": "in-process", "time": 0}
    run = {"exit_code": 0, "duration": 5.0, "timeline": [{"t": 1.0, "pid": 1, "rss": 90}],
           "processes": [{"pid": 1, "snapshots": [dict(snap, phase="post-import", rss=30),
                                                  dict(snap, phase="idle", rss=80),
                                                  dict(snap, phase="exit", rss=40)]}]}
    from memgap.lab.figures import run_figures

    plain = run_figures(_run(run), "glibc", 1, 1, 0.0)
    assert (plain.idle, plain.post_rest, plain.python) == (80, 40, True)


@pytest.mark.parametrize("values,word", [
    ([100, 101, 100, 101], "flat"),
    ([100, 150, 100, 150], "oscillates"),
    ([100, 150, 200, 250], "grows linearly"),
    ([100, 180, 190, 260], "ratchets"),
])
def test_pattern_words(values, word):
    assert classify_pattern([v * MiB for v in values])[0] == word


def _runs(spec, idles, walls, status="ok"):
    return [RunFigures(spec, rep, 0, status, wall=w, idle=i * MiB, baseline=30 * MiB)
            for rep, (i, w) in enumerate(zip(idles, walls, strict=True), 1)]


def _verdict(table, max_slowdown=0.05):
    base = _runs("glibc", *table["glibc"])
    summaries = [summarize(V.parse_variant(spec), _runs(spec, *rows), base) for spec, rows in table.items()]
    return decide(summaries, "glibc", max_slowdown)


def test_verdict_needs_the_whole_range_to_clear_the_baseline():
    v = _verdict({"glibc": ([80, 90, 100], [3, 3, 3]),
                  "glibc:arena_max=2": ([70, 85, 95], [3, 3, 3])})  # overlaps: not better
    assert v.recommended is None and "keep the defaults" in v.reason


KIB = 1 / 1024  # in MiB, as _runs takes them


@pytest.mark.parametrize("base,other,better", [
    # a load driver whose memory is flat: the ranges clear each other by a few KiB
    ([37, 37 + 8 * KIB, 37 + 16 * KIB], [37 - 12 * KIB, 37 - 8 * KIB, 37 - 4 * KIB], False),
    ([60, 64, 68], [52, 56, 61], False),               # 12% lower, but the ranges overlap: noise
    ([100, 101, 102], [60, 61, 62], True),             # one clear winner
    ([17, 17, 17], [15.98, 15.98, 15.98], False),      # 6% lower, but 1 MiB only
    ([150, 150, 150], [147, 147, 147], False),         # 3 MiB lower, but 2% only
], ids=["flat", "overlapping", "clear", "under-the-byte-floor", "under-the-share"])
def test_better_than_the_baseline_takes_a_material_margin(base, other, better):
    v = _verdict({"glibc": (base, [3, 3, 3]), "glibc:mmap_threshold=131072": (other, [3, 3, 3])})
    summary = next(s for s in v.summaries if s.spec == "glibc:mmap_threshold=131072")
    assert summary.better is better
    if better:
        assert v.recommended is summary
    else:
        assert v.recommended is None
        assert v.reason.endswith("keep the defaults"), v.reason
        assert "at least 5% and 2 MiB lower" in v.reason  # the margin it was held to, stated


def _ran(options, runs):
    """The state of a lab with ``options`` that made ``runs``."""
    from memgap.lab.state import LabState

    state = LabState.start(options)
    state.results = list(runs)
    return state


def test_the_lab_document_and_its_report_state_the_margin():
    import io

    from memgap.lab.document import lab_document
    from memgap.lab.state import LabOptions
    from memgap.report.lab import render_lab

    runs = [RunFigures(spec, rep, 0, "ok", wall=1.0, idle=idle * MiB, baseline=30 * MiB)
            for rep in (1, 2) for spec, idle in (("glibc", 37), ("glibc:arena_max=2", 37.01))]
    options = LabOptions(cmd=["work"], variants=[V.parse_variant(s) for s in ("glibc", "glibc:arena_max=2")],
                         reps=2, lab_dir="/nonexistent")
    doc = lab_document(options, _ran(options, runs), 1.0)
    lab = doc.to_dict()
    assert lab["material"] == {"share": 0.05, "bytes": 2097152}
    assert lab["recommendation"] is None
    out = io.StringIO()
    render_lab(doc, out)
    text = " ".join(out.getvalue().split())
    assert "Better: its whole idle range below the baseline's, and its median at least 5% and 2 MiB lower" in text
    assert "keep the defaults" in text


def test_verdict_respects_the_slowdown_budget_and_prefers_the_cheapest():
    v = _verdict({
        "glibc": ([80, 90, 100], [3.0, 3.2, 3.1]),
        "glibc:mmap_threshold=131072": ([40, 41, 42], [4.0, 4.2, 4.1]),   # best memory, 33% slower
        "jemalloc": ([44, 45, 46], [3.0, 3.2, 3.1]),                       # preload
        "glibc:arena_max=2,trim=idle": ([45, 46, 47], [3.0, 3.1, 3.1]),    # trimmer: cheaper than a preload
    })
    assert v.recommended.spec == "glibc:arena_max=2,trim=idle"
    slow = next(s for s in v.summaries if s.spec == "glibc:mmap_threshold=131072")
    assert slow.better and not slow.within_budget
    assert v.summaries[0].spec == "jemalloc"  # ranked first among the eligible by idle median
    loose = _verdict({"glibc": ([80, 90, 100], [3, 3, 3]),
                      "glibc:mmap_threshold=131072": ([40, 41, 42], [4, 4, 4])}, max_slowdown=0.5)
    assert loose.recommended.spec == "glibc:mmap_threshold=131072"


def test_the_best_is_found_whatever_the_order_of_variants():
    v = _verdict({"glibc": ([80, 90, 100], [3, 3, 3]),
                  "glibc:trim=idle": ([52, 52, 53], [3, 3, 3]),
                  "glibc:arena_max=2,trim=idle": ([41, 41, 41], [3, 3, 3])})
    assert v.recommended.spec == "glibc:arena_max=2,trim=idle"
    assert "chosen over" not in v.reason
    assert [s.spec for s in v.summaries][:2] == ["glibc:arena_max=2,trim=idle", "glibc:trim=idle"]


def test_between_equal_costs_the_fewest_settings_win():
    v = _verdict({"glibc": ([48, 48, 48], [1.4, 1.4, 1.4]),
                  "glibc:arena_max=2,trim=idle": ([30, 30, 32], [1.4, 1.4, 1.4]),
                  "glibc:trim=idle": ([31, 30, 31], [1.4, 1.4, 1.4])})
    assert v.recommended.spec == "glibc:trim=idle"
    assert "simpler remedy" in v.reason


def test_a_costlier_remedy_wins_only_when_it_clearly_leaves_less():
    """Clearly: its whole idle range below the simpler one's, and its median more than 5% lower."""
    base = ([43, 43, 43], [1.4, 1.4, 1.4])
    trim = ([27.2, 27.4, 27.5], [1.4, 1.4, 1.4])
    clearly = _verdict({"glibc": base, "glibc:trim=idle": trim,   # the async burst's figures, 2 cores
                        "glibc:trim=idle,pymalloc=release": ([25.4, 25.5, 25.5], [1.4, 1.4, 1.4])})
    assert clearly.recommended.spec == "glibc:trim=idle,pymalloc=release"
    slightly = _verdict({"glibc": base, "glibc:trim=idle": trim,  # below the range, but 3% lower only
                         "glibc:trim=idle,pymalloc=release": ([26.4, 26.5, 26.6], [1.4, 1.4, 1.4])})
    assert slightly.recommended.spec == "glibc:trim=idle"
    assert "does not clear it by 5%" in slightly.reason
    noisy = _verdict({"glibc": base, "glibc:trim=idle": trim,     # lower median, but its range overlaps
                      "glibc:trim=idle,pymalloc=release": ([15, 20, 27.3], [1.4, 1.4, 1.4])})
    assert noisy.recommended.spec == "glibc:trim=idle"


def test_too_slow_means_beyond_the_budget_and_the_baselines_own_spread():
    base = ([43, 43, 43], [1.43, 1.47, 1.48])  # the async burst's walls: a 3.4% spread
    v = _verdict({"glibc": base,
                  "glibc:trim=idle": ([27, 27, 27], [1.52, 1.55, 1.41]),   # x1.054: inside the noise
                  "jemalloc": ([33, 33, 33], [1.60, 1.65, 1.62])})         # x1.09 at least: a cost
    by_spec = {s.spec: s for s in v.summaries}
    assert 1.05 < by_spec["glibc:trim=idle"].slowdown < 1.06 and by_spec["glibc:trim=idle"].within_budget
    assert not by_spec["jemalloc"].within_budget
    single = _verdict({"glibc": ([43], [1.47]), "glibc:trim=idle": ([27], [1.55])})  # one run: no spread known
    assert not next(s for s in single.summaries if s.spec == "glibc:trim=idle").within_budget
    assert single.recommended is None


def test_a_baseline_spread_wider_than_the_budget_grants_the_budget_again_and_no_more():
    # the GPU lane's lab (H200, 2026-11-28): the fragmenting loop's steps per second spread 26,160-51,280 in the
    # baseline's own runs (67%); expandable segments' median slowdown x1.37 passed under the whole spread
    base = ([7040, 7040, 7040], [1 / 37657.5, 1 / 26159.6, 1 / 51279.2])
    v = _verdict({"glibc": base, "torch:expandable_segments=True": ([6612, 6612, 6612],
                                                                     [1 / 27462.5, 1 / 25579.2, 1 / 36140.4])})
    slow = next(s for s in v.summaries if s.spec != "glibc")
    assert slow.better and slow.slowdown > 1.2 and not slow.within_budget
    assert v.recommended is None
    assert noise_allowance(0.667, 0.05) == 0.05 and noise_allowance(0.034, 0.05) == 0.034


def test_a_variant_that_failed_a_run_is_not_recommended():
    base = _runs("glibc", [80, 90, 100], [3, 3, 3])
    crashed = _runs("jemalloc", [40, 41], [3, 3]) + _runs("jemalloc", [0], [1], status="crashed")
    summaries = [summarize(V.parse_variant("glibc"), base, base),
                 summarize(V.parse_variant("jemalloc"), crashed, base)]
    v = decide(summaries, "glibc", 0.05)
    assert v.recommended is None
    assert summaries[1].reason == "1 crashed"


def test_allocators_in_the_users_folders_come_first(monkeypatch, tmp_path):
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")  # a path lookup: the file is never loaded here
    monkeypatch.setenv("MEMGAP_ALLOCATOR_DIRS", f"/nonexistent:{tmp_path}")
    assert find_library("jemalloc") == str(tmp_path / "libjemalloc.so.2")


def test_a_pymalloc_setting_on_a_program_that_is_not_python_did_not_apply():
    from memgap.lab.figures import run_figures

    def run(route):
        snap = {"rss": 30, "layers": {}, "status": {}, "allocator": {"name": "glibc"}, **REQUIRED, "route": route,
                "time": 0}
        return _run({"exit_code": 0, "duration": 1.0, "timeline": [],
                     "processes": [{"pid": 1, "snapshots": [dict(snap, phase="post-import"),
                                                            dict(snap, phase="idle")]}]})

    outside = run_figures(run("outside, with the agent"), "glibc:pymalloc=off", 1, 1, 0.0)
    assert outside.status == "not-applied" and "not a Python one" in outside.note
    assert run_figures(run("in-process"), "glibc:pymalloc=off", 1, 1, 0.0).status == "ok"
    assert run_figures(run("outside, with the agent"), "glibc", 1, 1, 0.0).status == "ok"


def test_a_server_seen_only_from_outside_shows_its_trimmer_and_its_interpreter():
    """A server stopped by a signal has no in-process snapshot: the bootstrap's trimmer-start
    event says a trimmer took, and its command line says it is Python."""
    from memgap.lab.figures import run_figures

    snap = {"rss": 30, "layers": {}, "status": {}, "allocator": {"name": "glibc"}, **REQUIRED, "route": "outside",
            "time": 0, "phase": "quiet"}

    def run(cmd, **entry):
        return _run({"exit_code": -15, "duration": 1.0, "stopped_at_idle": True, "timeline": [],
                     "processes": [{"pid": 1, "cmd": cmd, "snapshots": [snap], **entry}]})

    server = ["/usr/bin/python3", "-m", "uvicorn", "app:app"]
    assert run_figures(run(server), "glibc:trim=every:1", 1, 1, 0.0).status == "not-applied"
    assert run_figures(run(server, trimmer="every 1 s"), "glibc:trim=every:1", 1, 1, 0.0).status == "ok"
    assert run_figures(run(server), "glibc:pymalloc=off", 1, 1, 0.0).status == "ok"
    assert run_figures(run(["./server"]), "glibc:pymalloc=off", 1, 1, 0.0).status == "not-applied"


def test_a_c_programs_agent_is_known_by_its_exit_record_where_no_read_asked_it():
    """A C program whose only reads are at its held exit (no agent asked there) and a quiet spell read after
    it exited (a loaded machine): its agent's exit record says the agent ran, so a trim=idle variant is
    judged on what that trim needs (a marked idle), not refused as if nothing could trim in it."""
    from memgap.lab.figures import run_figures

    snap = {"rss": 30, "layers": {}, "status": {}, "allocator": {"name": "glibc"}, **REQUIRED, "route": "outside",
            "time": 0, "phase": "before-exit", "held_exit": True}

    def run(**entry):
        return _run({"exit_code": 0, "duration": 2.0, "timeline": [],
                     "processes": [{"pid": 1, "cmd": ["./c_rest"], "snapshots": [snap], **entry}]})

    seen = run_figures(run(agent_exit={"allocator": "glibc"}), "glibc:trim=idle", 1, 1, 0.0)
    assert seen.status == "not-applied" and "trim=quiet" in seen.note, seen.note
    unseen = run_figures(run(), "glibc:trim=idle", 1, 1, 0.0)
    assert unseen.status == "not-applied" and "had neither" in unseen.note, unseen.note


def test_a_trimmer_variants_idle_is_what_its_own_trims_left():
    from memgap.lab.figures import run_figures

    def run(trims=None, agent_trims=0):
        snap = {"rss": 80, "layers": {}, "status": {}, "allocator": {"name": "glibc"}, **REQUIRED,
                "route": "in-process", "time": 0}
        proc = {"pid": 1, "snapshots": [dict(snap, phase="post-import", rss=30), dict(snap, phase="idle"),
                                        dict(snap, phase="exit", rss=20)]}
        if trims:
            proc["trims"] = [{"time": 1, "rss_before": 80, "rss_after": after} for after in trims]
        if agent_trims:
            proc["agent_exit"] = {"trimmer": {"mode": "idle", "trims": float(agent_trims)}}
        return _run({"exit_code": 0, "duration": 5.0, "timeline": [], "processes": [proc]})

    assert run_figures(run(trims=[50, 45]), "glibc:trim=quiet", 1, 1, 0.0).idle == 45  # its last trim
    assert run_figures(run(agent_trims=1), "glibc:trim=quiet", 1, 1, 0.0).idle == 20  # at exit
    idle = run_figures(run(), "glibc:trim=quiet", 1, 1, 0.0)  # it never trimmed: not the exit figure
    assert idle.idle == 80 and "did not trim while the program lived" in idle.note


def test_a_recommended_idle_trim_says_when_the_idle_trimmer_never_got_to_trim():
    from memgap.lab.document import lab_document
    from memgap.lab.state import LabOptions

    specs = ["glibc", "glibc:trim=idle", "glibc:trim=quiet"]
    never = "the idle trimmer did not trim while the program lived (...)"
    runs = [RunFigures(spec, rep, 0, "ok", wall=1.4, idle=idle * MiB, baseline=23 * MiB, note=note)
            for rep in (1, 2, 3) for spec, idle, note in (("glibc", 43, ""), ("glibc:trim=idle", 27, ""),
                                                         ("glibc:trim=quiet", 43, never))]
    options = LabOptions(cmd=["work"], variants=[V.parse_variant(s) for s in specs], lab_dir="/nonexistent")
    rec = lab_document(options, _ran(options, runs), 1.0).recommendation
    assert rec is not None and rec.variant == "glibc:trim=idle" and "never trimmed" in rec.notes[-1]
    trimmed = [r for r in runs if r.variant != "glibc:trim=quiet"] + [
        RunFigures("glibc:trim=quiet", rep, 0, "ok", wall=1.4, idle=30 * MiB, baseline=23 * MiB) for rep in (1, 2, 3)]
    rec = lab_document(options, _ran(options, trimmed), 1.0).recommendation
    assert rec is not None and not any("never trimmed" in note for note in rec.notes)


def test_a_sweeps_summaries_are_classes_and_write_the_labs_json():
    """lab_document with two cells: each cell, its summaries and recommendation, the sweep's rows
    and the top recommendation across the cells as memgap.documents.lab_summary's classes, written as the
    lab has always written them (the keys in their order)."""
    from memgap.documents.lab_summary import AcrossCell, Cell, Recommendation, SweepRow
    from memgap.lab.document import lab_document
    from memgap.lab.state import LabOptions

    runs = []
    for n, base in (("1", 40), ("2", 80)):
        for rep in (1, 2):
            for spec, idle in (("glibc", base), ("glibc:trim=idle", 20)):
                runs.append(RunFigures(spec, rep, 0, "ok", wall=1.0, idle=idle * MiB, peak=2 * base * MiB))
                runs[-1].params = {"N": n}
    options = LabOptions(cmd=["work"], variants=[V.parse_variant(s) for s in ("glibc", "glibc:trim=idle")],
                         reps=2, lab_dir="/nonexistent", params=[("N", ["1", "2"])])
    doc = lab_document(options, _ran(options, runs), 1.0)
    assert [type(c) for c in doc.cells] == [Cell, Cell] and doc.cell == {"N": "2"}
    assert isinstance(doc.recommendation, Recommendation) and doc.recommendation.variant == "glibc:trim=idle"
    assert doc.variants[0].spec == "glibc:trim=idle" and doc.variants[0].word("glibc:trim=idle", "glibc")
    rows = doc.sweep["glibc"]
    assert all(isinstance(r, SweepRow) for r in rows) and rows[1].idle_growth == 1.0 and rows[0].idle_growth == 0.0
    assert [a.word for a in doc.across_cells] == ["recommended", "recommended"]
    assert isinstance(doc.across_cells[1], AcrossCell) and doc.across_cells[1].baseline_idle == 80 * MiB
    # the lab stores the remedy's data; its forms are rendered at the edge, as the lab's JSON carries them
    # (runs that are not Python's: the trimmer comes from the agent)
    assert doc.recommendation.env["MEMGAP_AGENT"] == "on" and doc.recommendation.shell == []
    assert not doc.recommendation.carries_forms()
    data = json.loads(json.dumps(lab_with_forms(doc).to_dict()))
    for rec in (data["recommendation"], data["cells"][1]["recommendation"]):
        assert rec == remedy_forms(remedy_lines(V.parse_variant("glibc:trim=idle"), python=False)) | {
            "variant": "glibc:trim=idle", "reason": doc.recommendation.reason}
    assert "  - name: MEMGAP_AGENT\n    value: \"on\"" in data["recommendation"]["kubernetes"]
    assert list(data["cells"][0]) == ["params", "variants", "verdict", "recommendation", "baseline_idle",
                                      "time_spread"]
    assert list(data["sweep"]["glibc"][0]) == ["params", "idle", "peak", "idle_growth", "peak_growth"]
    assert list(data["across_cells"][0]) == ["params", "word", "idle", "baseline_idle"]
    assert list(data["recommendation"])[:2] == ["variant", "reason"] and "kubernetes" in data["recommendation"]
    assert data["variants"] == data["cells"][1]["variants"]

def _fixed_runs(spec, idles, status="ok", wall=1.0):
    return [RunFigures(variant=spec, rep=k + 1, order=0, status=status, idle=idle, wall=wall)
            for k, idle in enumerate(idles)]


def test_the_adaptive_lab_drops_only_what_cannot_win():
    from memgap.lab.adaptive import cannot_win

    base = V.parse_variant("glibc")
    runs = _fixed_runs("glibc", [100 * MiB])
    def why(spec, idles, **kw):
        return cannot_win(V.parse_variant(spec), base, runs + _fixed_runs(spec, idles, **kw), 0.05)
    assert why("glibc:arena_max=2", [40 * MiB]) == ""                     # a contender
    assert why("glibc:arena_max=2", [95 * MiB]) == ""                     # 5% lower: could still win
    assert why("glibc:arena_max=2", [95 * MiB + 1]).startswith("its idle was not materially below")  # < 5%
    assert why("glibc:arena_max=2", [40 * MiB], status="crashed") == "no usable run (crashed)"
    assert why("glibc:arena_max=2", [40 * MiB], wall=1.6).startswith("far too slow (x1.60")  # > 1.5 x 1.05
    assert why("glibc:arena_max=2", [40 * MiB], wall=1.5) == ""
    assert cannot_win(base, base, runs, 0.05) == ""                        # the baseline always runs
    # dominated: another variant idles below it by twice the margin (10%, 4 MiB), within the budget
    others = runs + _fixed_runs("glibc:trim=idle", [40 * MiB])
    def against(idles, wall=1.0):
        return cannot_win(V.parse_variant("jemalloc"), base, others + _fixed_runs("jemalloc", idles, wall=wall), 0.05)
    assert against([50 * MiB]) == "glibc:trim=idle idled far below it in every run, within the budget"
    assert against([44 * MiB]) == ""                                       # 4 MiB: not far enough
    slow = runs + _fixed_runs("glibc:trim=idle", [40 * MiB], wall=1.3)     # the lower one is too slow
    assert cannot_win(V.parse_variant("jemalloc"), base, slow + _fixed_runs("jemalloc", [50 * MiB]), 0.05) == ""


def test_a_costlier_choice_over_a_simpler_winner_waits_for_every_repetition():
    from memgap.lab.adaptive import needs_every_rep
    from memgap.lab.verdict import decide, summarize

    specs = {"glibc": [100 * MiB] * 2, "glibc:trim=idle": [30 * MiB, 31 * MiB],
             "glibc:arena_max=2,trim=idle": [26 * MiB, 27 * MiB]}
    base_runs = _fixed_runs("glibc", specs["glibc"])
    summaries = [summarize(V.parse_variant(s), _fixed_runs(s, i), base_runs) for s, i in specs.items()]
    verdict = decide(summaries, "glibc", 0.05)
    assert verdict.recommended.spec == "glibc:arena_max=2,trim=idle" and needs_every_rep(verdict)
    del specs["glibc:arena_max=2,trim=idle"]
    summaries = [summarize(V.parse_variant(s), _fixed_runs(s, i), base_runs) for s, i in specs.items()]
    verdict = decide(summaries, "glibc", 0.05)
    assert verdict.recommended.spec == "glibc:trim=idle" and not needs_every_rep(verdict)


def _limited(spec, statuses, idle):
    """Runs under a 200 MiB --memory-limit: an OOM-killed one has no idle, and its cgroup peak is the limit."""
    return [RunFigures(spec, rep, 0, status, wall=1.0, idle=idle * MiB if status == "ok" else None,
                       cgroup_peak=(idle + 20) * MiB if status == "ok" else 200 * MiB, cgroup_limit=200 * MiB)
            for rep, status in enumerate(statuses, 1)]


def test_a_variant_oom_killed_in_any_run_is_never_recommended():
    killed_once = _limited("glibc:arena_max=1", ["ok", "oom-killed"], 60)  # the lowest idle, but killed once
    fits = _limited("glibc:arena_max=2", ["ok", "ok"], 90)
    for base_statuses in (["oom-killed", "ok"], ["ok", "ok"]):
        base = _limited("glibc", base_statuses, 150)
        summaries = [summarize(V.parse_variant(spec), runs, base) for spec, runs in
                     (("glibc", base), ("glibc:arena_max=1", killed_once), ("glibc:arena_max=2", fits))]
        verdict = decide(summaries, "glibc", 0.05)
        assert verdict.recommended is not None and verdict.recommended.spec == "glibc:arena_max=2", verdict.reason
        lowest = next(s for s in verdict.summaries if s.spec == "glibc:arena_max=1")
        assert not lowest.better and lowest.reason == "1 oom-killed" and lowest.cgroup_peak[2] == 200 * MiB
    # the baseline killed at the limit: the variant that ran within it wins on that alone
    base = _limited("glibc", ["oom-killed", "ok"], 150)
    verdict = decide([summarize(V.parse_variant("glibc"), base, base), summarize(V.parse_variant("glibc:arena_max=2"),
                                                                                  fits, base)], "glibc", 0.05)
    assert verdict.reason.startswith("the baseline (glibc) was OOM-killed at the memory limit in 1 of 2 runs; "
                                     "glibc:arena_max=2 ran within it in each of its 2 runs"), verdict.reason


def _finding(code, summary):
    from memgap.documents.snapshot import Finding

    return Finding(code, "warning", summary)


def test_each_finding_adds_its_variants_with_the_finding_as_the_reason():
    from memgap.allocators.registry import reader_for
    from memgap.lab.choose import FINDING_VARIANTS, choose

    copies = _finding("copied-from-parent", "4 forked processes copied 451.2 MiB of their parent's pages")
    retention = _finding("glibc-retention", "glibc holds 80.0 MiB free in 9 arenas (8 thread arenas)")
    got = {c.spec: c.reason for c in choose([copies, retention, _finding("unexplained", "x")], {"glibc"}, True)}
    held = f"finding glibc-retention: {retention.summary}"
    assert got == {"glibc:gc=freeze-at-fork": f"finding copied-from-parent: {copies.summary}",
                   **dict.fromkeys(FINDING_VARIANTS["glibc-retention"], held)}
    assert set(FINDING_VARIANTS["glibc-retention"]) >= {"glibc:arena_max=1", "glibc:arena_max=2,mmap_threshold=65536"}
    # fragmentation a trim cannot release: arena caps, a lower mmap threshold and another allocator
    frag = [c.spec for c in choose([_finding("glibc-fragmentation", "y")], set(), True)]
    assert "glibc:arena_max=2" in frag and "glibc:mmap_threshold=65536" in frag
    assert any(V.parse_variant(spec).allocator == "jemalloc" for spec in frag)
    # a spec two findings point to is chosen once, for the first of them
    both = choose([retention, _finding("many-arenas", "17 glibc arenas for 33 threads")], set(), True)
    assert [c.spec for c in both].count("glibc:arena_max=2") == 1
    assert next(c for c in both if c.spec == "glibc:arena_max=2").reason.startswith("finding glibc-retention")
    # the allocator the workload runs on: its own settings
    assert [c.spec for c in choose([], {"jemalloc"}, True)] == list(reader_for("jemalloc").own_variants)
    assert [c.spec for c in choose([], {"tcmalloc"}, False)] == ["tcmalloc:release_rate=10"]
    assert V.parse_variant("tcmalloc:release_rate=10").env()["TCMALLOC_RELEASE_RATE"] == "10"
    assert "muzzy_decay_ms:0" in V.parse_variant(reader_for("jemalloc").own_variants[0]).env()["MALLOC_CONF"]
    # Python's settings only for a workload seen to be Python
    assert choose([copies], {"glibc"}, False) == []
    # nothing found: nothing added; every spec of the tables parses
    assert choose([], {"glibc", "unknown"}, True) == []
    for spec in [*(s for specs in FINDING_VARIANTS.values() for s in specs),
                 *(s for name in ("jemalloc", "tcmalloc") for s in reader_for(name).own_variants)]:
        V.parse_variant(spec)


def test_a_choice_joins_the_lineup_once_and_a_default_variant_it_points_to_says_so():
    from memgap.lab.choose import DEFAULT_REASON, Choice, add_choices, first_reasons

    chosen = first_reasons([V.parse_variant(s) for s in V.DEFAULT_SPECS], default_set=True)
    assert chosen["glibc"].startswith("the baseline") and set(list(chosen.values())[1:]) == {DEFAULT_REASON}
    new = add_choices([Choice("glibc:gc=freeze-at-fork", "finding copied-from-parent: copies"),
                       Choice("glibc:arena_max=2", "finding many-arenas: arenas")], chosen)
    assert new == ["glibc:gc=freeze-at-fork"]
    assert chosen["glibc:gc=freeze-at-fork"] == "chosen because: finding copied-from-parent: copies"
    assert chosen["glibc:arena_max=2"] == "the default set; chosen because: finding many-arenas: arenas"
    assert add_choices([Choice("glibc:gc=freeze-at-fork", "again")], chosen) == []  # once
    assert chosen["glibc:gc=freeze-at-fork"] == "chosen because: finding copied-from-parent: copies"
    named = first_reasons([V.parse_variant("glibc"), V.parse_variant("jemalloc")], default_set=False)
    assert named == {"glibc": chosen["glibc"], "jemalloc": "named with --variant"}


def test_a_runs_findings_and_allocators_are_read_from_its_snapshots():
    from memgap.documents.records import ProcessRecord, RunDocument
    from memgap.lab.choose import run_evidence

    snap = {"phase": "quiet", "allocator": {"name": "jemalloc"},
            "findings": [{"code": "glibc-retention", "severity": "warning", "summary": "s", "evidence": ["e"],
                          "remedy": "r"}]}
    run = RunDocument([ProcessRecord(1, [snap, {"phase": "exit", "allocator": {}}])],
                      findings=[{"code": "python-growth", "severity": "warning", "summary": "g", "evidence": [],
                                 "remedy": "", "pid": 1}])
    findings, allocators = run_evidence(run)
    assert [(f.code, f.summary) for f in findings] == [("python-growth", "g"), ("glibc-retention", "s")]
    assert allocators == {"jemalloc"}


def test_the_reasons_are_shown_and_a_lab_without_them_shows_none():
    from memgap.documents.records import LabDocument
    from memgap.report.lab import chosen_lines

    lab = LabDocument(cmd=["x"], runs=[], chosen={
        "glibc": "the baseline: every other variant is measured against it",
        "glibc:gc=freeze-at-fork": "chosen because: finding copied-from-parent: copies",
        "glibc:arena_max=2": "the default set; chosen because: finding many-arenas: arenas",
        "jemalloc": "the default set"})
    assert chosen_lines(lab) == [
        "Variants: the baseline: every other variant is measured against it (1), the default set (1); "
        "2 chosen from the baseline's findings:",
        "  glibc:gc=freeze-at-fork: chosen because: finding copied-from-parent: copies",
        "  glibc:arena_max=2: chosen because: finding many-arenas: arenas (and the default set)"]
    assert chosen_lines(LabDocument(cmd=["x"], runs=[])) == []
    assert "chosen" in lab.to_dict() and "chosen" not in LabDocument(cmd=["x"], runs=[]).to_dict()
    assert LabDocument.from_dict(lab.to_dict()).chosen == lab.chosen


@pytest.mark.parametrize("python", [False, True])
def test_a_lab_rebuilt_from_its_journal_plans_the_runs_the_runner_would_make(tmp_path, python):
    """One rule (journal.worth_running) for the runner's skips and the rebuild's count: a Python setting
    is not planned once a run that saw the workload (here its idle read, no layers) found it is not
    Python, so that lab is complete; a Python workload's lab still owes that variant's run."""
    from memgap.lab.journal import Journal, rebuild, worth_running
    from memgap.lab.state import LabOptions, LabState

    options = LabOptions(("work",), (V.parse_variant("glibc"), V.parse_variant("glibc:pymalloc=off")), reps=1,
                         lab_dir=str(tmp_path / "lab"))
    run = RunFigures("glibc", 1, 1, "ok", wall=1.0, idle=50 * MiB, baseline=20 * MiB, python=python)
    with Journal(options.lab_dir) as journal:
        journal.header(options, LabState.start(options))
        journal.run(run)
    assert worth_running(options.variants[1], [run]) is python
    lab = rebuild(options.lab_dir)
    assert [r.variant for r in lab.runs] == ["glibc"] and lab.complete is not python
