"""The lab's objective (issue 32): the work's span, its time-weighted mean and its rests from a run's
samples; which figure decides by default; the verdict by it; a remedy that waits for a quiet spell
the workload never has; and the documents that carry them (a lab saved before keeps its bytes)."""
import io

from memgap.allocators import variants as V  # noqa: N812 - a short alias, as in test_lab_units
from memgap.documents.records import LabDocument, RunFigures
from memgap.lab.objective import decide_objective, quiet_warnings
from memgap.lab.verdict import decide, run_to_run_spread, summarize
from memgap.lab.work import (
    MIN_REST,
    OwnTrim,
    intervals_of,
    rests_within,
    rounds_of,
    stretches,
    time_weighted_mean,
    work_of,
)

MiB = 1 << 20


def _timeline(pattern, step=0.1):
    """Samples of a driver (pid 1, flat 20 MiB, idle) and a server (pid 2): ``pattern`` is one
    (rss MiB, CPU seconds used in the interval) per round for the server."""
    out, cpu = [], 0.0
    for k, (rss, used) in enumerate(pattern):
        cpu += used
        t = round(k * step, 4)
        out.append({"t": t, "pid": 1, "rss": 20 * MiB, "cpu": 0.5})
        out.append({"t": t, "pid": 2, "rss": rss * MiB, "cpu": round(cpu, 2)})
    return out


BURST = [(100, 0.03)] * 3   # 0.3 s of work at 100 MiB: an I/O-bound service's burst (0.09 s of CPU)
REST = [(100, 0.0)] * 10    # 1 s at rest: glibc keeps the pages
SERVICE = [(30, 0.05)] + BURST + REST + BURST + REST + BURST + REST


def test_a_bursty_service_has_two_rests_in_its_work_and_its_mean_is_its_steady_state():
    rounds = rounds_of(_timeline(SERVICE))
    assert [r.rss for r in rounds[:2]] == [50 * MiB, 120 * MiB]  # the tree: the driver's and the server's summed
    work = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t)
    # the work ends where the final rest began: the end of the third burst's last interval (round 29)
    assert work.end == rounds[29].t, work
    assert work.rests == [1.0, 1.0] and all(r >= MIN_REST for r in work.rests)
    # from the first rest (the first burst holds the start-up): 120 MiB held throughout
    assert work.start == rounds[3].t and work.mean == 120 * MiB
    assert rests_within(stretches(intervals_of(rounds)), 0.0, work.end) == work.rests
    # the mean is time-weighted: a round that lasted longer weighs more
    assert time_weighted_mean(rounds, 0.0, 0.2) == round((50 * 0.1 + 120 * 0.1) / 0.2 * MiB)


def test_the_bursts_cpu_is_theirs_alone_whatever_the_samples_steps():
    """A burst's time as the samples tell it: the CPU the tree used in it, the median over the bursts
    after the first, so a burst that began or ended anywhere in a sampling step counts the same; a
    blip in a rest, or the idle trimmer's trim there, is in no burst; a trim that cut a rest short,
    or a rest the samples missed, leaves a typical burst's figure as it was."""
    rounds = rounds_of(_timeline(SERVICE))
    assert work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t).cpu == 0.09
    # the same bursts cut across the steps (a first and last interval with a part of the burst's CPU each)
    split = [(100, 0.01)] + [(100, 0.03)] * 2 + [(100, 0.02)]
    shifted = rounds_of(_timeline([(30, 0.05)] + BURST + REST + split + REST + split + REST))
    assert work_of(shifted, 0.0, idle_at=shifted[-1].t, duration=shifted[-1].t).cpu == 0.09
    # a blip in a rest, and a trim's own CPU in the final rest (stamped as it returned): no burst's
    blip, trim = [(100, 0.01)], [(100, 0.0)] * 5 + [(60, 0.03)] + [(60, 0.0)] * 8
    quiet = rounds_of(_timeline([(30, 0.05)] + BURST + REST + blip + REST + BURST + REST + BURST + trim))
    work = work_of(quiet, 0.0, idle_at=quiet[-1].t, duration=quiet[-1].t, trims=[quiet[46].t + 0.02])
    assert work.rests == [2.1, 1.0] and work.cpu == 0.09, work
    # a trim every second in a rest (0.03 s: a burst of its own, cutting the rest in two) and one rest missed
    every = [(100, 0.0)] * 5 + [(60, 0.03)] + [(60, 0.0)] * 5
    cut = rounds_of(_timeline([(30, 0.05)] + BURST + REST + BURST + every + BURST + REST + BURST + BURST + REST))
    work = work_of(cut, 0.0, idle_at=cut[-1].t, duration=cut[-1].t)
    assert work.cpu == 0.09, work


def test_a_tick_in_the_middle_of_a_rest_leaves_the_rest():
    """The test service's poll (every 0.5 s) used a tick 0.5 s into a 1 s rest (load 15): the two
    quiet halves, 0.49 s each, were too short for a rest, and the run lost its first one."""
    half = [(100, 0.0)] * 5
    rounds = rounds_of(_timeline([(30, 0.05)] + BURST + half + [(100, 0.01)] + half + BURST + REST + BURST + REST))
    assert work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t).rests == [1.1, 1.0]


def test_a_quiet_spell_read_a_burst_early_ends_the_work_at_the_final_rest():
    """The quiet-spell rule (10% of a CPU) took the light bursts for rest and read the idle in the
    second rest, or inside the third burst: the work still ends where the final rest began."""
    rounds = rounds_of(_timeline(SERVICE))
    for moment in (rounds[22].t, rounds[28].t):
        work = work_of(rounds, 0.0, idle_at=moment, duration=rounds[-1].t, rested=rounds[17].t)
        assert work.end == rounds[29].t and work.rests == [1.0, 1.0], (moment, work)


def test_a_tick_of_a_timer_between_rests_is_no_burst():
    blip = [(100, 0.01)]  # one tick: a timer, a runtime's housekeeping
    rounds = rounds_of(_timeline([(30, 0.05)] + BURST + REST + blip + REST + BURST + REST))
    assert intervals_of(rounds) is not None
    assert work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t).rests == [2.1]


def test_the_idle_trimmers_trim_in_the_final_rest_is_no_burst_of_the_workload():
    """trim=quiet's trim 2 s into the final rest freed 90 MiB for 0.02-0.03 s of the server's CPU
    (the kernel's, freeing the pages): a burst by the CPU alone, which ended the work after it."""
    trim = [(100, 0.0)] * 20 + [(60, 0.03)] + [(60, 0.0)] * 8
    rounds = rounds_of(_timeline([(30, 0.05)] + BURST + REST + BURST + REST + BURST + trim))
    by_cpu = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t)
    assert by_cpu.end == rounds[50].t and by_cpu.rests == [1.0, 1.0, 2.0], by_cpu  # the trim taken for a burst
    stamped = rounds[50].t + 0.02  # the trimmer stamps its trim as it returns, after the round that read its CPU
    work = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t, trims=[stamped])
    assert work.end == rounds[29].t and work.rests == [1.0, 1.0], work


# the final rest of the trimmer variant in test_remedy_ships (load 6): its trim's CPU, 0.1 s of the server's,
# spread over the half second the trim took, began 2 s into the rest and returned 0.46 s later
SLOW_TRIM = [(100, 0.0)] * 20 + [(70, 0.02)] * 5 + [(60, 0.0)] * 10


def test_a_slow_trims_cpu_over_its_whole_span_is_no_burst_of_the_workload():
    """Stamped as it returned, the trim's interval and the one on either side counted as used none:
    its first intervals (0.06 s of CPU) made a burst, and the work ended 2.3 s after its final rest
    began. Its span and its thread's CPU (0.0973 s, two ticks of the samples' ten in one) take it all."""
    rounds = rounds_of(_timeline([(30, 0.05)] + BURST + REST + BURST + REST + BURST + SLOW_TRIM))
    began, returned = rounds[49].t + 0.02, rounds[53].t + 0.08
    stamped = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t, trims=[returned])
    assert stamped.end == rounds[52].t and stamped.rests == [1.0, 1.0, 2.0], stamped  # the flake
    spanned = OwnTrim(began, returned, 0.0973)
    work = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t, trims=[spanned])
    assert work.end == rounds[29].t and work.rests == [1.0, 1.0] and work.cpu == 0.09, work
    # the trim's CPU alone is taken: a burst that ran beside it is still one
    busy = rounds_of(_timeline([(30, 0.05)] + BURST + REST + BURST + REST + BURST + SLOW_TRIM[:20]
                               + [(70, 0.05)] * 5 + SLOW_TRIM[25:]))
    assert work_of(busy, 0.0, idle_at=busy[-1].t, duration=busy[-1].t, trims=[spanned]).end == busy[54].t


def test_a_periodic_trim_in_a_rest_leaves_the_rest_and_at_a_bursts_end_leaves_its_end():
    """trim=every trims whatever the workload does. In a rest, its CPU (0.04 s over three intervals)
    is no burst that cuts the rest in two halves too short for rests; in the last interval of a burst
    its CPU alone is taken from it (counted as used none, with the one on either side, as a trim
    stamped at its return was, the burst ended two intervals early)."""
    in_rest = [(100, 0.0)] * 4 + [(90, 0.01), (90, 0.02), (90, 0.01)] + [(90, 0.0)] * 4
    rounds = rounds_of(_timeline([(30, 0.05)] + BURST + in_rest + BURST + REST + BURST + REST))
    resting = OwnTrim(rounds[7].t + 0.01, rounds[10].t - 0.01, 0.038)
    assert work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t).rests == [1.0]  # the rest lost
    work = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t, trims=[resting])
    assert work.rests == [1.1, 1.0] and work.end == rounds[30].t, work
    in_burst = OwnTrim(rounds[29].t + 0.02, rounds[30].t - 0.05, 0.004)  # a tick of the burst's last interval
    stamped = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t, trims=[resting, in_burst.end])
    assert stamped.end == rounds[28].t, stamped
    work = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t, trims=[resting, in_burst])
    assert work.end == rounds[30].t and work.rests == [1.1, 1.0], work
    assert [round(u, 4) for _, _, u in intervals_of(rounds, [in_burst])[26:30]] == [0.0, 0.03, 0.03, 0.02]


def test_a_late_round_with_a_tick_in_a_rest_leaves_the_rest():
    """Beside 3 busy loops the sampler's rounds came 0.9 s apart, one holding a tick of the server's
    in a 1 s rest: by whole quiet intervals the rest was 0.1 s, none; the late round is quiet."""
    late = [{"t": t, "pid": 2, "rss": 100 * MiB, "cpu": cpu} for t, cpu in
            [(0.0, 0.1), (0.1, 0.15), (0.2, 0.2), (0.3, 0.25), (0.4, 0.25), (1.32, 0.26), (1.42, 0.3),
             (1.52, 0.35), (1.62, 0.35), (1.72, 0.35), (1.82, 0.35), (1.92, 0.35), (2.02, 0.35), (2.12, 0.4)]]
    parts = stretches(intervals_of(rounds_of(late)))
    assert [(a, b) for a, b, rest in parts if rest] == [(0.3, 1.32), (1.52, 2.02)], parts
    # a round as late that used a burst's CPU is no rest
    busy = [dict(s, cpu=s["cpu"] + (0.05 if s["t"] >= 1.32 else 0.0)) for s in late]
    assert not any(rest for _, b, rest in stretches(intervals_of(rounds_of(busy))) if b == 1.32)


def test_a_job_that_works_then_rests_has_no_rest_in_its_work():
    rounds = rounds_of(_timeline([(30, 0.05)] + BURST * 4 + REST))
    work = work_of(rounds, 0.0, idle_at=rounds[-1].t, duration=rounds[-1].t)
    assert work.rests == [] and work.end == rounds[12].t and work.start == 0.0


def test_samples_without_cpu_time_give_no_rests_and_the_span_of_the_idle():
    old = [{k: v for k, v in s.items() if k != "cpu"} for s in _timeline(SERVICE)]
    rounds = rounds_of(old)
    work = work_of(rounds, 0.0, idle_at=3.0, duration=4.0, rested=2.5)
    assert work.rests is None and work.end == 2.5 and work.mean is not None
    assert work_of(rounds, 0.0, idle_at=3.0, duration=4.0).end == 3.0


def test_a_load_or_a_quiet_spell_bounds_the_work():
    rounds = rounds_of(_timeline(SERVICE), pids={2})  # --process: the server alone
    work = work_of(rounds, 0.5, idle_at=None, duration=5.0, load_end=1.5)
    assert (work.start, work.end) == (0.5, 1.5)
    assert work.mean == 100 * MiB
    assert time_weighted_mean(rounds, 2.0, 2.0) is None  # an empty span has no mean


def _run(spec, rep, idle, mean, rests=(1.0, 1.0), wall=3.0):
    return RunFigures(spec, rep, 0, "ok", wall=wall, idle=idle * MiB, work_mean=mean * MiB,
                      rests=list(rests) if rests is not None else None, peak=200 * MiB)


def test_the_default_objective_follows_the_workload():
    bursty = [_run("glibc", 1, 100, 120), _run("glibc", 2, 100, 120)]
    assert decide_objective("", False, bursty)[0] == "mean"
    assert "bursts" in decide_objective("", False, bursty)[1]
    assert decide_objective("", False, [_run("glibc", 1, 100, 120, rests=[])])[0] == "idle"
    assert decide_objective("", True, [])[0] == "mean"  # --load
    assert decide_objective("peak", True, bursty) == ("peak", "chosen with --objective")
    # an earlier memgap's runs sampled no CPU time: idle, as it always was, and nothing said
    assert decide_objective("", False, [_run("glibc", 1, 100, 120, rests=None)]) == ("idle", "")


def test_the_mean_over_the_work_decides_where_the_idle_would_mislead():
    """The field report's service: a trim at the final rest takes the idle far down, the memory
    held between the bursts does not move; two arenas lower what it holds while it works."""
    table = {"glibc": [(150, 150), (148, 151)],
             "glibc:arena_max=2,trim=idle": [(46, 140), (60, 141)],
             "glibc:arena_max=2": [(100, 100), (101, 102)]}
    base = [_run("glibc", k + 1, i, m) for k, (i, m) in enumerate(table["glibc"])]
    summaries = [summarize(V.parse_variant(spec), [_run(spec, k + 1, i, m) for k, (i, m) in enumerate(rows)], base)
                 for spec, rows in table.items()]
    by_idle = decide(summaries, "glibc", 0.05)
    assert by_idle.recommended.spec == "glibc:arena_max=2,trim=idle" and by_idle.reason.startswith("idle RSS")
    summaries = [summarize(V.parse_variant(spec), [_run(spec, k + 1, i, m) for k, (i, m) in enumerate(rows)], base)
                 for spec, rows in table.items()]
    by_mean = decide(summaries, "glibc", 0.05, "mean")
    assert by_mean.recommended.spec == "glibc:arena_max=2", by_mean.reason
    assert by_mean.reason.startswith("mean RSS over the work 101 MiB (range 100-102)") and by_mean.objective == "mean"


def test_a_bursty_workloads_slowdown_is_its_bursts_cpu():
    """A trim every second lowers the memory held between the bursts, and each burst faults its pages
    back in: x1.2 the bursts' CPU, where the driver's wall time, its sleeps in it, moved by 2%. It is
    too slow by the bursts' time; a remedy that costs them nothing is picked."""
    def run(spec, rep, mean, cpu, wall):
        return RunFigures(spec, rep, 0, "ok", wall=wall, idle=60 * MiB, work_mean=mean * MiB, rests=[1.0, 1.0, 1.0],
                          work_cpu=cpu, peak=200 * MiB)

    table = {"glibc": [(100, 0.30, 4.0), (101, 0.31, 4.1)], "glibc:trim=every:1": [(50, 0.36, 4.08), (52, 0.37, 4.2)],
             "jemalloc:dirty_decay_ms=1000": [(70, 0.30, 4.0), (72, 0.31, 4.1)]}
    base = [run("glibc", k + 1, *row) for k, row in enumerate(table["glibc"])]
    summaries = [summarize(V.parse_variant(spec), [run(spec, k + 1, *row) for k, row in enumerate(rows)], base)
                 for spec, rows in table.items()]
    trims = summaries[1]
    assert trims.slowdown_by == "its bursts' CPU time" and round(trims.slowdown, 2) == 1.2
    verdict = decide(summaries, "glibc", 0.05, "mean")
    assert not trims.within_budget and verdict.recommended.spec == "jemalloc:dirty_decay_ms=1000", verdict.reason
    assert "(by its bursts' CPU time)" in verdict.reason
    # a run without the figure (a lab of an earlier memgap, or a baseline that did not rest): by wall time
    for r in base:
        r.work_cpu = None
    again = summarize(V.parse_variant("glibc:trim=every:1"), [run("glibc:trim=every:1", 1, 50, 0.36, 4.08)], base)
    assert again.slowdown_by == "" and round(again.slowdown, 2) == 1.02 and again.work_cpu is None


def test_a_bursty_workloads_slowdown_is_its_bursts_time_at_most_the_cpu_it_adds():
    """Where the runs hold a burst's length: the CPU a variant adds to a burst over the baseline's burst
    length (each added CPU second delays a burst by one at most). A burst that waits on I/O (0.3 s, 0.09 s
    of CPU) takes a remedy that adds 0.009 s of CPU to it (x1.1 its CPU) as x1.03 its time, within the
    budget; one that adds 0.06 s (x1.67 its CPU) as x1.2, too slow. The baseline's spread is said in the
    same terms: its CPU's range over its length."""
    def run(spec, rep, mean, cpu):
        return RunFigures(spec, rep, 0, "ok", wall=4.0, idle=60 * MiB, work_mean=mean * MiB, rests=[1.0, 1.0, 1.0],
                          work_cpu=cpu, work_wall=0.3, peak=200 * MiB)

    table = {"glibc": [(100, 0.09), (101, 0.093)], "glibc:trim=every:1": [(50, 0.099), (52, 0.102)],
             "jemalloc": [(60, 0.15), (61, 0.153)]}
    base = [run("glibc", k + 1, *row) for k, row in enumerate(table["glibc"])]
    summaries = [summarize(V.parse_variant(spec), [run(spec, k + 1, *row) for k, row in enumerate(rows)], base)
                 for spec, rows in table.items()]
    glibc, trims, jemalloc = summaries
    assert trims.slowdown_by == "its bursts' time, at most (the CPU it adds to a burst, over a burst's length)"
    assert trims.burst_length == 0.3 and round(trims.slowdown, 2) == 1.03 and round(jemalloc.slowdown, 2) == 1.2
    assert round(run_to_run_spread(glibc), 3) == 0.01  # 0.003 s of CPU over a 0.3 s burst
    verdict = decide(summaries, "glibc", 0.05, "mean")
    assert trims.within_budget and not jemalloc.within_budget
    assert verdict.recommended.spec == "glibc:trim=every:1", verdict.reason
    assert "(by its bursts' time, at most" in verdict.reason
    # a lab whose baseline runs hold no length (saved before it): by its bursts' CPU, as it was
    for r in base:
        r.work_wall = None
    again = summarize(V.parse_variant("glibc:trim=every:1"), [run("glibc:trim=every:1", 1, 50, 0.099)], base)
    assert again.slowdown_by == "its bursts' CPU time" and round(again.slowdown, 2) == 1.1
    assert again.burst_length is None


def test_a_remedy_that_waits_for_a_quiet_spell_the_workload_never_has_is_said_so():
    variants = [V.parse_variant(s) for s in ("glibc", "glibc:arena_max=2,trim=quiet", "glibc:trim=every:1")]
    runs = [_run("glibc", 1, 100, 120, rests=[1.0, 0.9]), _run("glibc:arena_max=2,trim=quiet", 1, 40, 110)]
    said = quiet_warnings(variants, runs, "mean")
    assert list(said) == ["glibc:arena_max=2,trim=quiet"]  # a trim every second waits for nothing
    assert "after 2 s of quiet" in said["glibc:arena_max=2,trim=quiet"]
    assert "longest rest during the work was 1.0 s" in said["glibc:arena_max=2,trim=quiet"]
    # rests long enough for it: nothing to say; a job with no rest in its work, judged at its idle: nothing
    assert quiet_warnings(variants, [_run("glibc", 1, 100, 120, rests=[2.5])], "mean") == {}
    assert quiet_warnings(variants, [_run("glibc", 1, 100, 120, rests=[])], "idle") == {}


def test_the_document_carries_the_objective_and_an_earlier_lab_keeps_its_bytes():
    from memgap.lab.document import lab_document
    from memgap.lab.state import LabOptions, LabState
    from memgap.report.lab import render_lab

    specs = ("glibc", "glibc:arena_max=2")
    runs = [_run(spec, rep, idle, mean) for rep in (1, 2)
            for spec, idle, mean in (("glibc", 100, 150), ("glibc:arena_max=2", 100, 100))]
    options = LabOptions(cmd=("work",), variants=tuple(V.parse_variant(s) for s in specs), reps=2, lab_dir="/x")
    state = LabState.start(options)
    state.results = runs
    doc = lab_document(options, state, 1.0)
    data = doc.to_dict()
    assert data["objective"] == "mean" and "bursts" in data["objective_why"]
    assert data["recommendation"]["variant"] == "glibc:arena_max=2"
    assert all("mean" in v for v in data["variants"]) and all("work_mean" in r for r in data["runs"])
    again = LabDocument.from_dict(data)
    assert again.to_dict() == data
    out = io.StringIO()
    render_lab(again, out)
    text = " ".join(out.getvalue().split())
    assert "work mean" in text and "Judged by the mean RSS over the work" in text
    assert "Better: its whole work mean range below the baseline's" in text
    # without the new figures (a lab of an earlier memgap) nothing of them is written
    for r in runs:
        r.work_mean = r.rests = r.work_cpu = None
    state.results = runs
    old = lab_document(options, state, 1.0).to_dict()
    assert "objective" not in old and all("mean" not in v for v in old["variants"])
    assert all("work_mean" not in r and "rests" not in r and "work_cpu" not in r for r in old["runs"])
    assert all("work_cpu" not in v and "slowdown_by" not in v for v in old["variants"])


def test_a_bursty_runs_figures_come_from_its_samples():
    """run_figures on a run document made by hand: a driver (pid 1) and its server (pid 2) whose
    samples hold their CPU time; the server's idle read before its exit (3.9 s)."""
    from memgap.documents.records import RunDocument
    from memgap.lab.figures import run_figures

    snap = {"phase": "before-exit", "rss": 100 * MiB, "layers": {}, "status": {}, "allocator": {"name": "glibc"},
            "pid": 2, "unexplained": 0, "route": "in-process", "time": 1000.0 + 3.9}
    run = RunDocument.from_dict({"schema": "memgap.run/1", "start": 1000.0, "exit_code": 0, "duration": 4.0,
                                 "timeline": _timeline(SERVICE), "processes": [{"pid": 2, "snapshots": [snap]}]})
    m = run_figures(run, "glibc", 1, 1, 0.0)
    assert m.rests == [1.0, 1.0] and m.work_span == [0.3, 2.9], (m.rests, m.work_span)
    assert m.work_mean == 120 * MiB  # the tree: the driver's 20 and the server's 100, from the first rest on
    assert m.wall == 2.9  # the work's time: from the start to its final rest (a quiet spell may misplace it)
    assert m.work_cpu == 0.09  # a burst after the first: 3 intervals of 0.03 s of the server's CPU
    assert m.work_wall == 0.2  # its 3 intervals of the samples, less one: a burst's edges fall anywhere in a step


def test_a_trimmer_variants_wall_ends_where_its_final_rest_began_whatever_its_trim_took():
    """test_remedy_ships' flake on a run document made by hand: the trimmer variant's trim 2 s into
    the final rest took 0.46 s and 0.1 s of the server's CPU. Recorded with its span and CPU, the
    work ends where the final rest began; a recording from before (its return alone) still loads."""
    from memgap.documents.records import RunDocument
    from memgap.lab.figures import run_figures

    pattern = [(30, 0.05)] + BURST + REST + BURST + REST + BURST + SLOW_TRIM
    snap = {"phase": "before-exit", "rss": 60 * MiB, "layers": {}, "status": {}, "allocator": {"name": "glibc"},
            "pid": 2, "unexplained": 0, "route": "in-process", "time": 1000.0 + 6.3}
    trim = {"time": 1005.38, "rss_before": 100 * MiB, "rss_after": 60 * MiB, "started": 1004.92, "cpu": 0.0973}

    def figures(recorded, by_agent=False):
        proc = {"pid": 2, "snapshots": [snap], "trimmer": "idle", "trims": [recorded]}
        if by_agent:  # a C server: its agent's trimmer, whose exit record lists its trims
            proc = {"pid": 2, "snapshots": [snap], "agent_exit": {"allocator": "glibc", "trims": [recorded],
                                                                  "trimmer": {"mode": "idle", "trims": 1.0}}}
        run = RunDocument.from_dict({"schema": "memgap.run/1", "start": 1000.0, "exit_code": 0, "duration": 6.4,
                                     "timeline": _timeline(pattern), "processes": [proc]})
        return run_figures(run, "glibc:trim=quiet", 1, 1, 0.0)

    m = figures(trim)
    assert m.status == "ok" and m.idle == 60 * MiB and m.rests == [1.0, 1.0] and m.wall == 2.9, m
    by_agent = figures(trim, by_agent=True)
    assert by_agent.rests == [1.0, 1.0] and by_agent.wall == 2.9, by_agent
    old = figures({k: trim[k] for k in ("time", "rss_before", "rss_after")})
    assert old.idle == 60 * MiB and old.wall == 5.2 and old.rests == [1.0, 1.0, 2.0], old  # as before: the flake
