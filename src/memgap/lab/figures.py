"""What one lab run measured, from its recording (pure: a run document in, figures out)."""
from __future__ import annotations

import itertools
import os
import re
import statistics

from memgap.allocators.variants import Variant, parse_variant
from memgap.documents.recorded import CgroupCharge, RecordedSnapshot
from memgap.documents.records import ProcessIdle, ProcessRecord, RunDocument, RunFigures, RunStatus, TrimMode
from memgap.documents.trim import TrimRecord
from memgap.lab.work import BURSTY_RESTS, OwnTrim, rounds_of, work_of
from memgap.record.idle import BEFORE_EXIT_PHASE, QUIET_PHASE, idle_of_process
from memgap.record.tree_copies import copied_at_idle
from memgap.record.tree_idle import peak_of_tree, tree_at_idle

MiB = 1 << 20  # the lab stores figures, the report formats them: its own constant, not report.units'
MAX_POINTS = 300  # timeline points kept per run for charts
# snapshots memgap takes, not phases the program marked
UNMARKED = (QUIET_PHASE, BEFORE_EXIT_PHASE, "exit", "after-trim")
NO_IDLE = ("no idle: the workload marked no phase named idle, showed no quiet spell and left no moment "
           "before its exit to read")




def _main_process(run: RunDocument, process: str = "") -> ProcessRecord | None:
    """The process the figures describe: the one whose command line matches ``process``,
    else the largest one memgap took a snapshot of (its marks and layers are there), unless
    one it has only samples of rose far higher (a server whose quiet spell no snapshot
    caught: twice as high and 16 MiB more), else the root."""
    candidates = run.processes
    if process:
        pattern = re.compile(process)
        candidates = [p for p in candidates if pattern.search(" ".join(p.cmd))]
    highest: dict[int, int] = {}
    for s in run.timeline:
        highest[s["pid"]] = max(highest.get(s["pid"], 0), s["rss"])
    for p in candidates:
        highest[p.pid] = max([highest.get(p.pid, 0), *(snap["rss"] for snap in p.snapshots)])
    with_snaps = [p for p in candidates if p.snapshots]
    best = max(with_snaps, key=lambda p: highest[p.pid]) if with_snaps else None
    sampled = [p for p in candidates if not p.snapshots and highest.get(p.pid)]
    bigger = max(sampled, key=lambda p: highest[p.pid]) if sampled else None
    if bigger is not None and (best is None or highest[bigger.pid] > max(2 * highest[best.pid],
                                                                         highest[best.pid] + 16 * MiB)):
        return bigger
    return best or (candidates[0] if candidates else None)


def _at_mark(snap: RecordedSnapshot) -> int:
    """A phase's RSS at the moment it was marked: a snapshot taken from outside reads
    the program while it runs on, and its own figure is the one its layers add up to."""
    return int(snap.get("rss_at_mark") or snap["rss"])


def classify_pattern(values: list[int]) -> tuple[str, str]:
    """Words for RSS over repeated bursts: flat, oscillates, ratchets, grows linearly."""
    if len(values) < 3:
        return "", ""
    evidence = " -> ".join(f"{v / MiB:.0f}" for v in values) + " MiB"
    steps = [b - a for a, b in itertools.pairwise(values)]
    scale = max(2 * MiB, 0.03 * max(values))
    if all(abs(s) < scale for s in steps):
        return "flat", evidence
    ups = [s for s in steps if s >= scale]
    downs = [s for s in steps if s <= -scale]
    if ups and downs:
        return "oscillates", evidence
    if len(ups) == len(steps) and max(ups) < 2 * min(ups):
        return "grows linearly", evidence
    if ups and not downs:
        return "ratchets", evidence
    return "falls", evidence


def _is_python(proc: ProcessRecord) -> bool:
    """Whether the process is a Python interpreter: a snapshot or a trimmer of memgap's
    bootstrap in it, pymalloc's arenas read from outside, or its command line (a server
    stopped by a signal, under PYTHONMALLOC=malloc, has nothing else to show)."""
    if proc.trimmer or proc.trims or any(s.get("route") == "in-process" for s in proc.snapshots):
        return True
    if any(((s.get("layers") or {}).get("pymalloc_free") or {}).get("resident") for s in proc.snapshots):
        return True
    return bool(proc.cmd) and os.path.basename(proc.cmd[0]).startswith("python")


def _trimmer_reached(proc: ProcessRecord) -> bool:
    """Whether something that can trim ran inside the process: the Python bootstrap (its
    snapshots, its trimmer started, or its trims) or the agent (its exit record, or a read that
    asked it: a read at a held exit does not, and a loaded machine may read its quiet spell only
    after its exit)."""
    if proc.trimmer or proc.trims or proc.agent_exit is not None:
        return True
    return any(s.get("route") == "in-process" or "agent" in s.get("allocator", {}) for s in proc.snapshots)


def _sigkill_cause(oom_kills: int | None) -> str:
    """What the kernel's count of OOM kills (/proc/vmstat oom_kill) says about a SIGKILL."""
    if oom_kills is None:
        return " (the OOM killer, or another process)"
    if oom_kills > 0:
        return f" by the kernel's OOM killer (/proc/vmstat oom_kill +{oom_kills} while it ran)"
    return " (not by the OOM killer: /proc/vmstat oom_kill did not move while it ran)"


def run_figures(run: RunDocument, variant: Variant | str, rep: int, order: int, cpu: float,
                metric: str = "", process: str = "") -> RunFigures:
    """Figures of one run of ``variant`` (a spec is parsed). A trim=idle variant is itself
    the idle trim: its idle figure is the RSS after that trim; a trim=quiet one (the idle
    trimmer) acts once the program has rested: its figure is the RSS after its last trim.
    A run did not apply the variant ("not-applied") when its process reports another malloc
    than the variant's, a trimmer found neither memgap's bootstrap nor its agent in the
    process, glibc ran more arenas than the variant's arena_max, or a pymalloc setting met a
    process that is not Python. ``process``: a regular expression for the command line of
    the process the figures describe (default: the largest)."""
    if isinstance(variant, str):
        variant = parse_variant(variant)
    m = RunFigures(variant=variant.spec, rep=rep, order=order, status=RunStatus.OK, exit_code=run.exit_code,
                   wall=float(run.duration or 0.0), duration=float(run.duration or 0.0), cpu=cpu,
                   record_dir=run.record_dir)
    _ending(m, run, metric)
    proc = _main_process(run, process)
    if proc is None:
        if process and m.status == RunStatus.OK:
            m.status, m.note = RunStatus.NO_PROCESS, f"no process of the workload's tree matched --process {process!r}"
        return m
    _process_figures(m, run, proc)
    if proc.snapshots:
        _check_applied(m, variant, proc)
    found = _idle_and_work(m, run, proc)
    _over_the_work(m, run, proc, found, bool(process))
    mode = TrimMode.of(variant.trim)
    if mode is TrimMode.IDLE and m.after_trim is not None:
        m.idle = m.after_trim
    elif mode is TrimMode.IDLE and m.idle is not None and m.status == RunStatus.OK:
        m.status = RunStatus.NOT_APPLIED
        m.note = ("the one trim at idle did not act: it follows a marked idle, or a Python program's moment "
                  "before exit, and this process had neither (stopped by a signal, as servers are; or not "
                  "Python): the trim=quiet variants measure the idle trimmer in such a process")
    if mode is TrimMode.QUIET and m.idle is not None:
        _idle_after_the_trimmer(m, proc)
    if not process:
        _tree_total(m, run, proc, variant)
    m.gpu_idle, m.gpu_peak = gpu_of_tree(run, found.time if found is not None else None)
    return m


def gpu_of_tree(run: RunDocument, idle_at: float | None) -> tuple[int | None, int | None]:
    """The tree's device memory (NVML's per-process figures, summed per sampling round): at the last round at
    or before ``idle_at`` (the idle's time; its last round where None), and at its highest round; (None, None)
    where no sample held any (no GPU: a run's samples then are as they always were)."""
    rounds: dict[float, int] = {}
    for s in run.timeline:
        if "gpu" in s:
            rounds[s["t"]] = rounds.get(s["t"], 0) + s["gpu"]
    if not rounds:
        return None, None
    at = idle_at - run.start if idle_at is not None and run.start else None
    before = [t for t in rounds if at is None or t <= at] or [min(rounds)]
    return rounds[max(before)], max(rounds.values())


def _ending(m: RunFigures, run: RunDocument, metric: str) -> None:
    """How the run ended (timeout, stopped at idle, killed, crashed), and its throughput."""
    code = run.exit_code
    if run.timed_out:
        m.status = RunStatus.TIMEOUT
    elif run.stopped_at_idle:
        m.note = "stopped by the lab once idle"
    elif code is not None and code < 0:
        m.status = RunStatus.KILLED
        m.note = f"killed by signal {-code}" + (_sigkill_cause(run.oom_kills) if code == -9 else "")
    elif code:
        m.status = RunStatus.CRASHED
        m.note = f"exit code {code}"
    _in_cgroup(m, run.cgroup, code)
    if metric:
        m.throughput = run.metrics.get(metric)
        if m.throughput is None and m.status == RunStatus.OK:
            m.status, m.note = RunStatus.NO_METRIC, f"the workload reported no metric {metric!r}"


def _in_cgroup(m: RunFigures, cgroup: CgroupCharge | None, code: int | None) -> None:
    """The run's own memory cgroup: its peak, and whether the kernel OOM-killed in it (its
    oom_kill count; a kernel before 4.13 has none: a SIGKILL after the charge hit the limit)."""
    if not cgroup:
        return
    m.cgroup_peak, m.cgroup_limit = cgroup.get("peak"), cgroup.get("limit")
    kills = cgroup.get("oom_kills")
    if kills or (kills is None and cgroup.get("limit_hits") and code == -9):
        where = f"at the limit ({m.cgroup_limit / MiB:.0f} MiB)" if m.cgroup_limit else "in the run's cgroup"
        m.status = RunStatus.OOM_KILLED
        m.note = (f"{where}: the kernel's OOM killer killed "
                  + (f"{kills} process{'es' * (kills > 1)} of the run" if kills else "it"))


def _process_figures(m: RunFigures, run: RunDocument, proc: ProcessRecord) -> None:
    """The measured process's timeline, phases, layers, peak and post-rest; the tree's idles."""
    m.processes = len({s["pid"] for s in run.timeline})
    m.tree = [{"cmd": " ".join(p.cmd)[:120], "idle": p.idle.rss, "pss": p.idle.pss, "rule": p.idle.label}
              for p in run.processes if p.idle]
    m.process = " ".join([os.path.basename(proc.cmd[0]), *proc.cmd[1:]])[:120] if proc.cmd else ""
    points = [(s["t"], s["rss"]) for s in run.timeline if s["pid"] == proc.pid]
    m.timeline = points[::max(1, len(points) // MAX_POINTS)]
    samples = [rss for _, rss in points]
    snaps = proc.snapshots
    # after the rest: at exit (before the interpreter tears down), else the last sample
    at_exit = [s["rss"] for s in snaps if s["phase"] == "exit"]
    m.post_rest = at_exit[-1] if at_exit else (samples[-1] if samples else None)
    m.python = _is_python(proc)
    m.layers = [{"phase": s["phase"], "rss": s["rss"],
                 "layers": {name: layer["resident"] for name, layer in s["layers"].items()}} for s in snaps]
    m.phases = [(s["phase"], _at_mark(s)) for s in snaps]
    hwm = max((s["status"].get("VmHWM", 0) for s in snaps), default=0)
    m.peak = max([*samples, hwm]) or None
    m.vm_peak = max((s["status"].get("VmPeak", 0) for s in snaps), default=0) or None
    marked = [s for s in snaps if s["phase"] not in UNMARKED]
    m.baseline = _at_mark(marked[0]) if marked else None  # the program's first phase, if it marks any
    trimmed = proc.trims_at_marks()
    if trimmed and trimmed[-1].performed:
        m.after_trim, m.trim_released = trimmed[-1].rss_after, trimmed[-1].released
    bursts = [rss for phase, rss in m.phases if phase not in ("idle", *UNMARKED) and phase != m.phases[0][0]]
    m.pattern, m.pattern_evidence = classify_pattern(bursts)


def _check_applied(m: RunFigures, variant: Variant, proc: ProcessRecord) -> None:
    """Mark the run "not-applied" when what the variant sets did not reach the process."""
    if m.status != RunStatus.OK:
        return
    snaps = proc.snapshots
    seen = snaps[0].get("allocator", {}).get("name")
    arenas = max((n for s in snaps if isinstance(n := s.get("allocator", {}).get("arenas"), int)), default=0)
    # a variant that leaves malloc alone (the baseline, a runtime's settings) applies to a program without
    # glibc's malloc too (a static Go program: "unknown")
    if variant.sets_malloc and seen and seen != variant.allocator:
        m.note = f"the process ran {seen}, not {variant.allocator}: the preload did not take"
    elif variant.arena_max and arenas > variant.arena_max and (seen or variant.allocator) == variant.allocator:
        m.note = (f"glibc ran {arenas} arenas, more than arena_max={variant.arena_max}: the setting did not take "
                  "(a setuid program ignores it, and a program may call mallopt itself)")
    elif variant.python_only and not m.python:
        m.note = "a Python setting, and the process measured is not a Python one memgap could see inside"
    elif variant.trim and not _trimmer_reached(proc):
        m.note = ("a trimmer needs memgap's bootstrap (Python) or its native agent in the process; "
                  "this one had neither")
    else:
        return
    m.status = RunStatus.NOT_APPLIED


def _idle_and_work(m: RunFigures, run: RunDocument, proc: ProcessRecord) -> ProcessIdle | None:
    """The idle figure (marked or found, see memgap.record.idle) and how long the work itself took;
    returns the idle found."""
    # load_run finds each process's idle; a document made otherwise may not say
    found = proc.idle if proc.idle is not None else idle_of_process(proc.to_dict(), run.timeline, run.start)
    if found:
        m.idle, m.idle_rule = int(found.rss), found.label
        if found.work_ended and run.start:  # not the rest, nor memgap's reads at exit
            m.wall = found.work_ended - run.start
    elif m.status == RunStatus.OK:
        m.status = RunStatus.NO_IDLE
        m.note = NO_IDLE
    if run.load_seconds:  # a service under the user's load: the work is the load
        m.wall = float(run.load_seconds)
    elif run.stopped_at_idle and run.start:
        # The lab waited for quiet, then stopped it: the work ended at its last phase before idle, as the
        # phase's line came (read_began), not when memgap's reader, busy with other reads, finished reading it
        before_idle = [s.get("read_began") or s["time"] for s in proc.snapshots
                       if s["phase"] not in ("idle", *UNMARKED)]
        if before_idle:
            m.wall = max(before_idle) - run.start
    return found


def _over_the_work(m: RunFigures, run: RunDocument, proc: ProcessRecord, found: ProcessIdle | None,
                   one_process: bool) -> None:
    """The work span, the mean RSS over it (the tree's, summed per sampling round, or the one process
    --process names) and the rests within it (memgap.lab.work says how each is found)."""
    rounds = rounds_of(run.timeline, {proc.pid} if one_process else None)
    if not rounds:
        return
    start, load_end, rested = 0.0, None, None
    if run.load_started is not None and run.load_seconds:  # a service under --load: the work is the load
        start, load_end = run.load_started, run.load_started + run.load_seconds
    if found is not None and found.rule == "quiet" and found.work_ended and run.start:
        rested = found.work_ended - run.start  # the quiet spell's rest began there
    idle_at = found.time - run.start if found is not None and found.time and run.start else None
    # memgap's own trims in the tree (its trimmers'), each over its span, with its CPU: no burst of the workload's
    trims = [OwnTrim((t.started or t.time) - run.start, t.time - run.start, t.cpu)
             for p in run.processes for t in [*(p.trims or []), *_agent_trims(p)] if t.time is not None and run.start]
    work = work_of(rounds, start, idle_at, m.duration, load_end, rested, trims)
    m.work_mean, m.work_span, m.rests = work.mean, [work.start, work.end], work.rests
    if load_end is None and work.rests is not None and len(work.rests) >= BURSTY_RESTS:
        m.wall = work.end  # a bursty run's work, to the final rest its CPU shows (a quiet spell misses light bursts)
    if load_end is None:
        m.work_cpu = work.cpu  # a burst's CPU, as the samples can tell it (memgap.lab.work.bursts_cpu)
        m.work_wall = work.wall  # ...and its length (memgap.lab.work.bursts_wall)


def _agent_trims(proc: ProcessRecord) -> list[TrimRecord]:
    """The trims its native agent's trimmer made, as its exit record lists them (none before they were)."""
    return [TrimRecord.from_dict(t, "agent's trim") for t in (proc.agent_exit or {}).get("trims") or []]


def _idle_after_the_trimmer(m: RunFigures, proc: ProcessRecord) -> None:
    """A trimmer variant's idle figure: the RSS after the idle trimmer's last trim, as the
    trimmer recorded it (Python), or at exit when the native agent says it trimmed; when it
    never acted while the program lived, the idle figure stays, and the note says so."""
    trims = proc.trims or []
    agent_trims = ((proc.agent_exit or {}).get("trimmer") or {}).get("trims") or 0
    if trims:
        m.idle = trims[-1].rss_after
    elif agent_trims and m.post_rest is not None:
        m.idle = m.post_rest
    else:
        m.note = "; ".join(filter(None, [m.note, "the idle trimmer did not trim while the program lived (it "
                                         "trims after 2 s of quiet following a burst, when glibc holds "
                                         "16 MiB free or pymalloc=release is on)"]))


def _tree_total(m: RunFigures, run: RunDocument, proc: ProcessRecord, variant: Variant) -> None:
    """Where several processes of the tree live at the measured process's idle, rank on their
    sum counted without double-counting shared pages (memgap.record.tree_idle): each one's PSS at its
    own idle, less what the variant's trims then released (private pages: PSS falls by as much).
    The peak becomes the tree's: the highest sum of the RSS of one sampling round (no PSS is
    sampled: reading smaps_rollup ten times a second would cost the tree's sampling its rate)."""
    if m.idle is None:
        return
    tree = tree_at_idle(run, proc)
    if tree is None:
        return
    total = 0
    for p in tree.processes:
        if p.idle is None:
            continue  # tree_at_idle keeps only processes with an idle
        after = m.idle if p is proc else _after_variant(p, variant)
        released = max(0, p.idle.rss - after)
        total += max(0, tree.each[p.pid] - released)  # its PSS read while the tree was whole
    m.process_idle, m.idle = m.idle, total
    m.tree_how = tree.how() + (", less what the variant's trims released" if variant.trim else "")
    m.copied = copied_at_idle(run)
    peak = peak_of_tree(run.timeline)
    if peak is not None:  # never below the measured process's own (its VmHWM may pass its samples)
        m.process_peak, m.peak = m.peak, max(peak[0], m.peak or 0)
        m.tree_how += (f"; the peak is the tree's: the highest sum of its processes' RSS sampled at one round "
                       f"({peak[1]} processes; RSS counts a shared page once per process)")


def _after_variant(p: ProcessRecord, variant: Variant) -> int:
    """A process's idle RSS after what the variant does at idle: its trimmer's last trim, or the lab's one trim."""
    idle = p.idle.rss if p.idle is not None else 0
    mode = TrimMode.of(variant.trim)
    if mode is TrimMode.QUIET and p.trims:
        return p.trims[-1].rss_after
    trimmed = [t for t in p.trims_at_marks() if t.performed]
    if mode is TrimMode.IDLE and trimmed:
        return trimmed[-1].rss_after
    return idle


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
