"""Idle found without the program's help: the quiet-spell rule and the finder (pure)."""
import os

from memgap.record.idle import QuietSpell, find_idle

MiB = 1 << 20
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


def _feed(spell, readings):
    """(t, cpu seconds, rss) readings; the events the spell reports, with their times."""
    return [(t, e) for t, cpu, rss in readings if (e := spell.update(t, cpu, rss))]


def test_a_quiet_spell_is_reported_once_after_its_length_and_ends_when_work_resumes():
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, 0.5, 100 * MiB) for t in range(25)]          # 2.4 s idle at 100 MiB
    readings += [(2.5, 0.9, 100 * MiB)]                                  # 0.4 s of CPU at once: work
    assert _feed(spell, readings) == [(1.0, "quiet"), (2.5, "end")]
    assert spell.since == 2.5 and not spell.reported


def test_a_spell_after_work_is_reported_its_length_after_the_work_ended():
    """A full core of work until 1.0 s, then rest: the spell begins where the work ended and is
    reported 1 s later, not 1 s after the work left the busy window (2 s later: a program resting
    2 s then ended before its quiet snapshot could be read)."""
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, min(t / 10, 1.0), 100 * MiB) for t in range(35)]
    assert _feed(spell, readings) == [(2.0, "quiet")]
    assert spell.since == 1.0 and spell.rested_since == 1.0


def test_cpu_under_a_tenth_of_a_core_is_quiet_and_above_it_is_not():
    low = QuietSpell(after=1.0)
    assert _feed(low, [(t / 10, 0.008 * t, 50 * MiB) for t in range(12)]) == [(1.0, "quiet")]  # 8% of a core
    high = QuietSpell(after=1.0)
    assert _feed(high, [(t / 10, 0.02 * t, 50 * MiB) for t in range(30)]) == []  # 20%: never quiet


def test_a_process_starved_of_cpu_is_working_and_one_that_waits_briefly_at_rest_is_quiet():
    """Under load a program starting up runs 5% of the time and waits on the run queue the rest: its
    little CPU is not rest (the readings of a Python program at load 20, read "quiet" before its first
    phase). A resting one woken often waits a little at each wake: rest all the same."""
    starved = QuietSpell(after=1.0)
    assert [(t, e) for t in (x / 10 for x in range(30))
            if (e := starved.update(t, 0.005 * t * 10, 20 * MiB, waited=0.95 * t))] == []
    resting = QuietSpell(after=1.0)
    assert [(t, e) for t in (x / 10 for x in range(12))
            if (e := resting.update(t, 0.001 * t * 10, 20 * MiB, waited=0.2 * t))] == [(1.0, "quiet")]


def test_rss_that_moves_ends_a_spell_and_a_steady_one_keeps_it():
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, 0.0, 100 * MiB + t * 64 * 1024) for t in range(11)]  # +0.7 MiB: steady
    assert _feed(spell, readings) == [(1.0, "quiet")]
    assert spell.update(1.1, 0.0, 140 * MiB) == "end"                        # +40 MiB: the program works


def test_a_short_burst_late_in_a_long_spell_ends_it():
    """A forked worker's request after seconds of rest: 0.25 s of CPU, no RSS moved (its copies
    on write do not move RSS), under a tenth of the whole spell, but not of its last second."""
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, 0.1, 100 * MiB) for t in range(51)]              # 5 s of rest
    readings += [(5.1, 0.2, 100 * MiB), (5.2, 0.35, 100 * MiB)]              # a full collection
    assert _feed(spell, readings) == [(1.0, "quiet"), (5.2, "end")]


def _snap(phase, t, rss, **extra):
    return {"phase": phase, "time": t, "rss": rss, **extra}


def test_a_marked_idle_wins_over_everything_found():
    snaps = [_snap("quiet", 5.0, 80, quiet_since=4.0), _snap("idle", 6.0, 90), _snap("before-exit", 9.0, 70)]
    found = find_idle(snaps, [], last_seen=9.0, last_rss=70)
    assert (found.rule, found.rss, found.label) == ("marked", 90, "idle (marked)")


def test_the_last_quiet_spell_that_lasted_to_the_end_is_idle_with_its_length():
    snaps = [_snap("quiet", 2.0, 50, quiet_since=1.0), _snap("quiet", 8.0, 80, quiet_since=7.0),
             _snap("before-exit", 9.1, 81)]
    found = find_idle(snaps, quiet_ends=[3.0], last_seen=9.1, last_rss=81)
    assert (found.rule, found.rss, found.label) == ("quiet", 80, "idle (quiet 2.1 s)")


def test_work_after_the_last_quiet_spell_makes_the_moment_before_exit_idle():
    snaps = [_snap("quiet", 2.0, 50, quiet_since=1.0), _snap("before-exit", 9.0, 120)]
    found = find_idle(snaps, quiet_ends=[3.0], last_seen=9.0, last_rss=120)
    assert (found.rule, found.rss) == ("before exit", 120)
    # killed while working: no moment before exit, so the last spell, said to have had work after it
    found = find_idle(snaps[:1], quiet_ends=[3.0], last_seen=9.0, last_rss=130)
    assert found.rss == 50 and "work followed" in found.label


def test_a_process_seen_only_from_outside_gets_its_last_sample_and_an_unseen_one_nothing():
    found = find_idle([], [], last_seen=None, last_rss=12 * MiB)
    assert (found.rule, found.rss, found.snapshot) == ("last sample", 12 * MiB, None)
    assert find_idle([], [], last_seen=None, last_rss=None) is None


def test_the_figure_is_the_rss_read_at_the_mark_when_memgap_read_it_from_outside():
    snaps = [_snap("idle", 1.0, 200, rss_at_mark=150, quiet_since=0.5)]
    found = find_idle(snaps, [], last_seen=1.0, last_rss=None)
    assert found.rss == 150 and found.label == "idle (quiet 0.5 s, --idle-after)"


def test_a_spell_ended_by_the_process_shutting_down_still_counts_as_lasting():
    snaps = [_snap("quiet", 5.0, 88, quiet_since=4.0)]
    found = find_idle(snaps, quiet_ends=[7.5], last_seen=8.0, last_rss=60)  # stopped: 0.5 s of shutdown
    assert (found.rule, found.rss, found.label) == ("quiet", 88, "idle (quiet 3.5 s, then its shutdown)")
    found = find_idle(snaps, quiet_ends=[7.5], last_seen=12.0, last_rss=60)  # 4.5 s of work after it
    assert "work followed" in found.label


def test_a_long_shutdown_that_began_as_the_spell_ended_is_still_a_shutdown():
    """A gunicorn master with PYTHONMALLOC=malloc, told to stop beside busy loops: its spell ended at 21.96 s,
    its interpreter began to shut down at 22.09 (its before-exit snapshot) and took 3 s to free its objects;
    judged by when it was last seen, its idle was "before exit", after its workers had exited."""
    snaps = [_snap("quiet", 5.1, 324, quiet_since=3.26), _snap("before-exit", 22.09, 324, collect_seconds=0.05)]
    found = find_idle(snaps, quiet_ends=[21.96], last_seen=24.96, last_rss=326)
    assert (found.rule, found.rss, found.label) == ("quiet", 324, "idle (quiet 18.7 s, then its shutdown)")
    # work of its own between the spell and the exit (3 s) is not a shutdown
    snaps[1] = _snap("before-exit", 25.0, 330, collect_seconds=0.05)
    assert find_idle(snaps, quiet_ends=[21.96], last_seen=25.1, last_rss=330).rule == "before exit"


def test_memory_given_back_at_rest_is_told_again_once_it_holds():
    """A trim during the rest drops RSS: still the same rest and spell, told again at the lower figure
    at the first reading that holds (its snapshot then shows it); RSS that rises after it is work."""
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, 0.0, 160 * MiB) for t in range(15)]     # rest from 0.0
    readings += [(t / 10, 0.01, 80 * MiB) for t in range(15, 30)]   # a trim at 1.5 s gives 80 MiB back
    assert _feed(spell, readings) == [(1.0, "quiet"), (1.6, "quiet")]
    assert spell.since == 0.0 and spell.rested_since == 0.0 and spell._rss0 == 80 * MiB
    assert spell.update(3.0, 0.01, 120 * MiB) == "end" and spell.rested_since == 3.0  # RSS rose: work


def test_a_runtime_giving_back_late_in_a_short_rest_is_told_at_its_lower_figure():
    """Go's scavenger, as a lab recorded it on a loaded machine: the spell told at 344 MiB 1 s into a
    2 s rest, then 174 MiB given back over 0.2 s, 0.65 s before the exit. The spell used to end there
    and find no second to be told again in: the idle stayed 344 against the program's own 174 at the
    end of its rest. Told again once RSS holds, the last figure is the rest's."""
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, 2.0, 344 * MiB) for t in range(10, 26)]          # 1.0-2.5 s at rest
    readings += [(2.6, 2.0, 338 * MiB), (2.7, 2.01, 249 * MiB), (2.8, 2.01, 170 * MiB)]
    readings += [(t / 10, 2.01, 170 * MiB) for t in range(29, 34)]
    assert _feed(spell, readings) == [(2.0, "quiet"), (2.9, "quiet")]
    assert spell.since == 1.0 and spell._rss0 == 170 * MiB


def test_memory_given_back_before_the_spell_is_told_keeps_the_spell():
    """A runtime giving pages back 1 s into its rest (Go's scavenger: 345 -> 333 MiB, 0.9 s into a
    2 s rest, measured): still the rest, so the spell is told on time, at the lower figure (restarted,
    no spell of 1 s fitted in the rest of an unmodified Go program, and it had no idle)."""
    spell = QuietSpell(after=1.0)
    readings = [(t / 10, 0.0, 345 * MiB) for t in range(9)]
    readings += [(t / 10, 0.01, 333 * MiB) for t in range(9, 20)]
    assert _feed(spell, readings) == [(1.0, "quiet")]
    assert spell.since == 0.0 and spell.rested_since == 0.0 and spell._rss0 == 333 * MiB


def test_a_process_read_as_it_exits_leaves_its_last_figure_not_zero():
    """The last sample of a process read as it exits (a zombie: no VmRSS) says 0: its figure before is
    the moment before its exit."""
    from memgap.record.idle import idle_of_process

    timeline = [{"pid": 7, "t": 0.1, "rss": 300 * MiB}, {"pid": 7, "t": 0.2, "rss": 333 * MiB},
                {"pid": 7, "t": 0.3, "rss": 0}]
    found = idle_of_process({"pid": 7, "snapshots": []}, timeline, start=100.0)
    assert (found.rss, found.rule) == (333 * MiB, "last sample")


def test_a_pss_read_again_counts_only_while_the_spell_held():
    """A quiet process's PSS is read again as others go quiet (a master's PSS falls as its workers
    copy, its RSS steady). A reading whose RSS moved beyond the spell's slack came after the spell
    ended unseen (a program freeing its memory as it exits): the driver of a lab test once summed
    to 29 MiB that way, its 117 MiB of ballast gone."""
    from memgap.record.idle import QUIET_PHASE, _pss_at_idle

    snap = {"phase": QUIET_PHASE, "time": 10.0, "rss": 117 * MiB, "status": {"Pss": 110 * MiB}}
    master = {"pss_reads": [[11.0, 90 * MiB, 117 * MiB], [12.0, 80 * MiB, 116 * MiB]]}
    assert _pss_at_idle(snap, master) == 80 * MiB  # shared pages copied by others: PSS falls, RSS holds
    exiting = {"pss_reads": [[11.0, 100 * MiB, 117 * MiB], [12.0, 5 * MiB, 8 * MiB]]}
    assert _pss_at_idle(snap, exiting) == 100 * MiB
    ended = {"pss_reads": [[11.0, 100 * MiB, 117 * MiB], [13.0, 50 * MiB, 117 * MiB]], "quiet_ends": [12.0]}
    assert _pss_at_idle(snap, ended) == 100 * MiB
    assert _pss_at_idle(snap, {"pss_reads": [[11.0, 70 * MiB]]}) == 70 * MiB  # recorded before RSS was kept


def _quiet_process(pid, rss, pss, at, reads, exit_at=None):
    """A run document's process that went quiet at ``at`` (a quiet snapshot then, its idle) and whose
    PSS was read again at each (time, PSS, RSS) of ``reads``; with ``exit_at``: its exit, sampled."""
    from memgap.record.idle import QUIET_PHASE

    snap = {"phase": QUIET_PHASE, "pid": pid, "time": at, "rss": rss, "quiet_since": at - 1.0,
            "status": {"Pss": pss}, "layers": {}, "unexplained": 0, "allocator": {"name": "glibc"}}
    return {"pid": pid, "snapshots": [snap], "pss_reads": [list(r) for r in reads],
            "idle": {"rss": rss, "rule": "quiet", "label": "idle (quiet)", "time": at, "pss": pss},
            "exit": {"time": exit_at, "by": "sampled"} if exit_at else None}


def test_a_tree_is_summed_from_pss_read_while_every_process_was_there():
    """A forked worker shares its master's pages: as workers exit, the master's PSS rises to its RSS
    with no RSS of its own (a gunicorn master at rest 150 MiB was read again at 281 MiB after its 4
    workers exited, and the lab summed the tree at 910 MiB where its driver read 763 MiB at rest). A
    reading counts while every other process was sampled at one RSS before and after it."""
    from memgap.documents.records import RunDocument
    from memgap.record.tree_idle import tree_at_idle

    start = 1000.0
    master = _quiet_process(1, 288 * MiB, 160 * MiB, start + 10,
                            [(start + 12, 150 * MiB, 288 * MiB), (start + 20, 281 * MiB, 289 * MiB)])
    workers = [_quiet_process(pid, 290 * MiB, 150 * MiB, start + 11, [(start + 12.5, 151 * MiB, 290 * MiB)],
                              exit_at=start + 19.5) for pid in (2, 3)]
    # the workers sampled at rest until 18 s, freeing as they exit (18.5 s), gone by 19.5 s
    timeline = [{"pid": pid, "t": t / 10, "rss": (290 if t <= 180 else 200) * MiB, "anon": 0, "file": 0}
                for t in range(50, 190, 5) for pid in (2, 3)]
    timeline += [{"pid": 1, "t": t / 10, "rss": 288 * MiB, "anon": 0, "file": 0} for t in range(50, 210, 5)]
    run = RunDocument.from_dict({"schema": "memgap.run/1", "start": start, "processes": [master, *workers],
                                 "timeline": timeline})
    tree = tree_at_idle(run, run.processes[0])
    assert tree is not None and tree.each == {1: 150 * MiB, 2: 151 * MiB, 3: 151 * MiB}, tree
    assert tree.pss == 452 * MiB and tree.by_rss == 0
    # a worker sampled at rest after the master's last reading: that reading counts (281 + 2 * 151 before)
    steady = [{**s, "rss": 290 * MiB} if s["pid"] != 1 else s for s in timeline]
    steady += [{"pid": pid, "t": 20.5, "rss": 290 * MiB, "anon": 0, "file": 0} for pid in (2, 3)]
    whole = RunDocument.from_dict({"schema": "memgap.run/1", "start": start, "processes": [master, *workers],
                                   "timeline": steady})
    assert tree_at_idle(whole, whole.processes[0]).each[1] == 281 * MiB


def test_a_tree_is_summed_from_pss_read_before_any_process_began_to_exit():
    """A gunicorn worker told to stop finalizes its interpreter for seconds (beside busy loops, 6 s with
    memgap's trim at exit) and writes every object it frees: its pages are copied, its RSS does not move,
    and its master's PSS read then rose from 151 to 166 MiB, its workers' from 147 to 167-177 (the lab's
    tree 843 MiB where the driver read 754 at rest). A reading counts before any process's ``before-exit``
    began (its snapshot's start), or its agent's hold of its exit."""
    from memgap.documents.records import RunDocument
    from memgap.record.idle import BEFORE_EXIT_PHASE
    from memgap.record.tree_idle import exit_began, tree_at_idle

    start = 1000.0
    master = _quiet_process(1, 286 * MiB, 151 * MiB, start + 5, [(start + 9.6, 151 * MiB, 286 * MiB),
                                                                   (start + 10.5, 166 * MiB, 286 * MiB)])
    worker = _quiet_process(2, 279 * MiB, 147 * MiB, start + 8, [(start + 9.7, 147 * MiB, 279 * MiB),
                                                                   (start + 10.6, 177 * MiB, 279 * MiB)])
    worker["snapshots"].append({"phase": BEFORE_EXIT_PHASE, "pid": 2, "time": start + 10.2, "collect_seconds": 0.05,
                                "rss": 279 * MiB, "layers": {}, "unexplained": 0, "allocator": {"name": "glibc"}})
    timeline = [{"pid": pid, "t": t / 10, "rss": (286 if pid == 1 else 279) * MiB, "anon": 0, "file": 0}
                for t in range(10, 160) for pid in (1, 2)]
    run = RunDocument.from_dict({"schema": "memgap.run/1", "start": start, "timeline": timeline,
                                 "processes": [master, worker]})
    assert abs(exit_began(run.processes[1]) - (start + 10.15)) < 1e-6 and exit_began(run.processes[0]) is None
    tree = tree_at_idle(run, run.processes[0])
    assert tree is not None and tree.each == {1: 151 * MiB, 2: 147 * MiB}, tree
    # an agent that held the exit 0.7 s: it began to exit as the hold began
    held = {**worker, "snapshots": worker["snapshots"][:1], "exit": {"time": start + 11.0, "by": "agent", "held": 0.7}}
    run = RunDocument.from_dict({"schema": "memgap.run/1", "start": start, "timeline": timeline, "processes": [held]})
    assert abs(exit_began(run.processes[0]) - (start + 10.3)) < 1e-6


def test_the_reads_of_a_moment_go_before_the_peak_reads_waiting():
    """A quiet spell's read waits for no peak read, and the tree's PSS read as it went quiet for no
    snapshot: beside busy loops, peak reads of a tree's 300 MiB workers took 2-4 s each, and quiet
    reads made 10-20 s after they were asked came after the rest."""
    from memgap.record.outside import PSS_EVENT, ReadAsked, _next_key

    peak, quiet = ReadAsked(2, "peak", 0.0, 1.0, event="peak"), ReadAsked(3, "quiet", 0.0, 2.0)
    batch = ReadAsked(3, "quiet", 0.0, 2.0, event=PSS_EVENT, then_pss=(2, 4))  # the quiet ones' PSS: first
    pending = {("peak", 2): (peak, None), ("peak", 4): (peak, None), ("once", 0): (quiet, None),
               PSS_EVENT: (batch, None)}
    assert _next_key(pending) == PSS_EVENT
    del pending[PSS_EVENT]
    assert _next_key(pending) == ("once", 0)
    del pending[("once", 0)]
    assert _next_key(pending) == ("peak", 2)  # then the peak reads, in the order asked


def test_a_quiet_spell_told_but_read_after_the_process_exited_is_still_its_idle():
    """The recorder tells each spell as it begins and asks its snapshot; the reads are made one at a time,
    and beside 4 busy loops a gunicorn master told quiet after its 4 workers (0.6-0.8 s a worker's read)
    was read 3.3 s later, after its driver had stopped it: the read failed, and its idle was taken from
    its snapshot before exit, after its workers had exited (the tree summed at 530 MiB where the driver
    read 321 MiB at rest, 3 runs of 4). The spell told is its idle, its PSS the one read as it was told."""
    from memgap.documents.records import RunDocument
    from memgap.record.idle import BEFORE_EXIT_PHASE, idle_of_process
    from memgap.record.tree_idle import tree_at_idle

    start = 1000.0
    before_exit = {"phase": BEFORE_EXIT_PHASE, "pid": 1, "time": start + 5.9, "rss": 287 * MiB,
                   "status": {"Pss": 287 * MiB}, "layers": {}, "unexplained": 0, "allocator": {"name": "glibc"}}
    told = [[start + 2.78, start + 1.78, start + 1.7, 286 * MiB]]  # when, since, rested since, RSS
    master = {"pid": 1, "snapshots": [before_exit], "quiet_told": told,
              "pss_reads": [[start + 2.79, 65 * MiB, 286 * MiB]]}
    timeline = [{"pid": pid, "t": t / 10, "rss": (286 if pid == 1 else 278) * MiB, "anon": 0, "file": 0}
                for t in range(10, 60) for pid in (1, 2)]
    idle = idle_of_process(master, timeline, start)
    assert (idle.rule, idle.rss, idle.pss) == ("quiet", 286 * MiB, 65 * MiB), idle
    assert idle.label == "idle (quiet 4.1 s; not read: it exited first)" and idle.work_ended == start + 1.7
    # a spell whose snapshot was read is not told twice; one read before a second telling (its RSS lowered) is
    read = {**before_exit, "phase": "quiet", "time": start + 3.1, "quiet_since": start + 1.78, "rss": 286 * MiB}
    assert idle_of_process({**master, "snapshots": [read, before_exit]}, timeline, start).time == start + 3.1
    lowered = [*master["quiet_told"], [start + 4.0, start + 1.78, start + 1.7, 270 * MiB]]
    assert idle_of_process({**master, "snapshots": [read, before_exit], "quiet_told": lowered},
                           timeline, start).rss == 270 * MiB
    # the tree: the master by the PSS read as it was told, while its worker was there
    worker = _quiet_process(2, 278 * MiB, 60 * MiB, start + 2.5, [(start + 2.79, 59 * MiB, 278 * MiB)])
    run = RunDocument.from_dict({"schema": "memgap.run/1", "start": start, "timeline": timeline,
                                 "processes": [{**master, "idle": idle.to_dict()}, worker]})
    tree = tree_at_idle(run, run.processes[0])
    assert tree is not None and tree.each == {1: 65 * MiB, 2: 59 * MiB}, tree


def test_a_master_whose_last_spell_began_as_its_workers_finalized_is_summed_from_an_earlier_reading():
    """A real recording (tests/fixtures/tree-idle/gunicorn-tcmalloc): the gunicorn master's last quiet spell
    began after its workers had begun to exit, and under tcmalloc their finalization gave back pages the
    master shares: every reading of its PSS in that spell came after the tree stopped being whole, and the
    lab summed the tree at 855 MiB where the driver read 767.8 at rest. Its reading at the same RSS in the
    spell before, the tree whole, sums it within 1% of the driver's."""
    from memgap.record.assemble import load_run
    from memgap.record.tree_idle import tree_at_idle

    run = load_run(os.path.join(FIXTURES, "tree-idle", "gunicorn-tcmalloc"))
    tree = tree_at_idle(run)
    assert tree is not None and len(tree.processes) == 6
    assert abs(tree.pss - 805064704) <= 0.01 * 805064704, tree.pss / MiB
    master = next(p for p in run.processes if "gunicorn" in " ".join(p.cmd) and p.ppid not in
                  {q.pid for q in run.processes if "gunicorn" in " ".join(q.cmd)})
    assert tree.each[master.pid] < 160 * MiB < master.idle.pss, (tree.each[master.pid] / MiB, master.idle.pss / MiB)
