"""Every renderer at 50, 80 and 120 columns, on documents from real commands run on real
programs: every figure whole, no line wider than the terminal but the lines to copy, and
those printed whole, each on one line."""
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import deque

import pytest
from rich.cells import cell_len

from helpers import memgap, recommended
from memgap.documents.records import TreeDocument
from memgap.documents.snapshot import Snapshot
from memgap.report.units import mib, pct

WIDTHS = (50, 80, 120)

# Holds memory in glibc's heap (half of it freed), then waits to be read.
HOLDER = ("import time\nblocks = [bytearray(64 * 1024) for _ in range(200)]\ndel blocks[::2]\n"
          "print('ready', flush=True)\ntime.sleep(60)\n")
# A parent with two children whose command lines are long: the tree's command column.
TREE = ("import subprocess, sys, time\n"
        "kid = 'import time; x = bytearray(6 << 20); x[::4096] = b\"1\" * len(x[::4096]); ' + \"print('up', flush=True)"
        "; time.sleep(60)  # \" + 'a long command line ' * 4\n"
        "kids = [subprocess.Popen([sys.executable, '-c', kid], stdout=subprocess.PIPE) for _ in range(2)]\n"
        "[k.stdout.readline() for k in kids]\nprint('ready', flush=True)\ntime.sleep(60)\n")
# Phases, a child process, and half of a burst left free at idle: what the lab's trim recovers.
WORK = ("import os, subprocess, sys, memgap\n"
        "kib = int(os.environ.get('WIDTHS_KIB', '64')) * int(os.environ.get('WIDTHS_COPIES', '1'))\n"
        "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.3)', 'a child with a long command line'])\n"
        "blocks = [bytearray(kib * 1024) for _ in range(300)]\n"
        "memgap.phase('burst')\ndel blocks[::2]\nmemgap.phase('idle')\n")


def _started(code):
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _json(*args):
    proc = memgap(*args, "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def holder():
    proc = _started(HOLDER)
    yield proc
    _stop(proc)


@pytest.fixture(scope="module")
def snap(holder):
    return Snapshot.from_dict(_json("inspect", str(holder.pid)))


@pytest.fixture(scope="module")
def tree():
    """The tree's document, as `inspect --tree --json` wrote it: its processes, totals and findings."""
    proc = _started(TREE)
    try:
        return TreeDocument.from_dict(_json("inspect", str(proc.pid), "--tree"))
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    path = tmp_path_factory.mktemp("widths") / "work.py"
    path.write_text(WORK)
    return str(path)


@pytest.fixture(scope="module")
def run(work, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run.json"
    proc = memgap("run", "--interval", "0.05", "--json", str(out), "--", sys.executable, work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _lab(work, tmp_path_factory, variant, *params):
    """A lab of the baseline and one variant, one run each per setting; the budget is wide
    open, so the variant's lower idle makes a recommendation and its Apply block."""
    out = tmp_path_factory.mktemp("lab") / "lab.json"
    args = ["lab", "--variant", "glibc", "--variant", variant, "--reps", "1", "--max-slowdown", "100"]
    for p in params:
        args += ["--param", p]
    proc = memgap(*args, "--json", str(out), "--", sys.executable, work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads(out.read_text())
    assert recommended(lab) == variant, lab["verdict"]
    return lab


@pytest.fixture(scope="module")
def lab_one_param(work, tmp_path_factory):
    # the longest spec the lab takes apart: wider than the narrowest terminal
    return _lab(work, tmp_path_factory, "glibc:arena_max=2,trim=idle,pymalloc=release", "WIDTHS_KIB=16,64")


@pytest.fixture(scope="module")
def lab_grid(work, tmp_path_factory):
    return _lab(work, tmp_path_factory, "glibc:arena_max=2,trim=idle", "WIDTHS_KIB=16,64", "WIDTHS_COPIES=1,2")


# --- the checks ------------------------------------------------------------------------------

def _whole(text, figure):
    """``figure`` on one line, neither cut (``16…``) nor part of a longer figure."""
    pattern = re.compile(r"(?<![\w.])" + re.escape(figure) + r"(?![\w.…])")
    return any(pattern.search(line) for line in text.splitlines())


def check(text, width, figures, copy=()):
    missing = [f for f in figures if not _whole(text, f)]
    assert not missing, f"cut or missing at {width} columns: {missing}\n{text}"
    for line in copy:
        assert any(line in printed for printed in text.splitlines()), f"{line!r} not whole at {width}\n{text}"
    wide = [line for line in text.splitlines() if cell_len(line) > width and not any(c and c in line for c in copy)]
    assert not wide, f"wider than {width} columns:\n" + "\n".join(wide)


def rendered(render, width):
    buf = io.StringIO()
    render(buf, width)
    return buf.getvalue()


def snapshot_figures(s, arenas=True):
    """The figures a breakdown of `s` prints; `arenas=False` where only its layers table is printed."""
    figures = [mib(s.rss), mib(s.unexplained)]
    for layer in s.layers.values():
        if layer.resident is not None:
            figures += [mib(layer.resident), pct(layer.resident, s.rss)]
    if not arenas:
        return figures
    arenas = (s.layers["allocator_free"].detail.get("arenas") or [])[:10]
    for a in arenas:
        figures += [mib(a["resident"]), mib(a["free_resident"]), mib(a["trim_releasable"])]
    return figures


def copy_lines(rec):
    """The lines a user pastes, as the lab document holds them."""
    return [*rec["setup"], " ".join(rec["shell"]), *rec["dockerfile"].splitlines(), " ".join(rec["systemd"]),
            *rec["python"].splitlines(), *rec["python_plain"].splitlines()]


# --- the renderers -----------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_breakdown_and_arenas(snap, width):
    from memgap.report.terminal import render_snapshot

    text = rendered(lambda out, w: render_snapshot(snap, out, w), width)
    check(text, width, [str(snap.pid), *snapshot_figures(snap)])


@pytest.mark.parametrize("width", WIDTHS)
def test_tree(tree, width):
    """The reported cut: PIDs and RSS as ``16…`` and ``208…`` in a 120-column terminal."""
    from memgap.report.terminal import render_tree

    assert len(tree.processes) == 3
    text = rendered(lambda out, w: render_tree(tree, out, w), width)
    figures = [f for s in tree.processes for f in (str(s.pid), mib(s.rss), mib(s.status["Pss"]), mib(s.status["Uss"]))]
    totals = tree.totals
    assert totals.layers_by == "pss"
    check(text, width, [*figures, mib(sum(s.rss for s in tree.processes)), mib(totals.pss), mib(totals.uss),
                        "3 processes"])


@pytest.mark.parametrize("width", WIDTHS)
def test_top_tree(tree, width):
    """top --tree: the heading's PSS total and RSS sum, and each layer summed by PSS."""
    from memgap.cli.top import refresh_of
    from memgap.report.live import frame
    from memgap.report.terminal import LAYER_TITLES, console_on

    text = rendered(lambda out, w: console_on(out, w).print(frame(refresh_of(deque([tree])), w)), width)
    totals = tree.totals
    check(text, width, [mib(totals.pss), mib(totals.rss_sum),
                        *(mib(v) for v in totals.layers.values() if v is not None)])
    assert "layers by PSS" in " ".join(text.split()) and LAYER_TITLES["python_objects"] in text


@pytest.mark.parametrize("width", WIDTHS)
def test_run(run, width):
    from memgap.documents.records import RunDocument
    from memgap.report.run import render_run

    text = rendered(lambda out, w: render_run(RunDocument.from_dict(run), out, w), width)
    by_pid = {}
    for sample in run["timeline"]:
        by_pid.setdefault(sample["pid"], []).append(sample["rss"])
    assert len(by_pid) >= 2, "the child shows in the timeline"
    figures = [f for pid, v in by_pid.items() for f in (str(pid), mib(v[0]), mib(max(v)), mib(v[-1]))]
    main = next(p for p in run["processes"] if p["snapshots"])
    figures += [f for s in main["snapshots"] for f in (s["phase"], mib(s["rss"]))]
    idle = next(s for s in main["snapshots"] if s["phase"] == "idle")
    check(text, width, figures + snapshot_figures(Snapshot.from_dict(idle)))


def _lab_figures(lab):
    """The figures of the lab's essential columns (idle, slowdown, verdict, and the cgroup peak
    under --memory-limit): the table keeps them at any width."""
    from memgap.documents.records import LabDocument
    from memgap.report.lab import table_rows, variant_columns

    doc = LabDocument.from_dict(lab)
    columns = variant_columns(doc)
    essential = [k for k, c in enumerate(columns) if not c.optional and c.header != "variant"]
    assert {columns[k].header for k in essential} >= {"idle", "slowdown", "verdict"}
    return [row[k] for row in table_rows(doc) for k in essential]


@pytest.mark.parametrize("width", WIDTHS)
def test_lab_with_one_swept_setting(lab_one_param, width):
    from memgap.documents.records import LabDocument
    from memgap.report.lab import render_lab

    lab = lab_one_param
    text = rendered(lambda out, w: render_lab(LabDocument.from_dict(lab), out, w), width)
    assert "recommended" in _lab_figures(lab)
    sweep = [mib(row["idle"], 0) for rows in lab["sweep"].values() for row in rows]
    check(text, width, _lab_figures(lab) + sweep, copy_lines(lab["recommendation"]))


@pytest.mark.parametrize("width", WIDTHS)
def test_lab_with_a_grid_and_plain_python_lines(lab_grid, width):
    from memgap.documents.records import LabDocument
    from memgap.report.lab import render_lab

    lab = lab_grid
    text = rendered(lambda out, w: render_lab(LabDocument.from_dict(lab), out, w), width)
    assert lab["recommendation"]["python_plain"] and lab["recommendation"]["setup"]
    sweep = [mib(row["idle"], 0) for rows in lab["sweep"].values() for row in rows]
    check(text, width, _lab_figures(lab) + sweep, copy_lines(lab["recommendation"]))
    if width == 50:  # the variants do not fit as a table: one line per figure
        assert "\n  verdict: recommended\n" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_top(holder, width):
    from memgap.cli.top import refresh_of
    from memgap.documents.snapshot import TreeSnapshot
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
    from memgap.explain.tree import tree_document
    from memgap.report.live import frame
    from memgap.report.terminal import console_on

    history = deque([tree_document(TreeSnapshot(holder.pid, [snapshot_pid(holder.pid, SnapshotOptions(regions=False))]))
                     for _ in range(3)])
    now = history[-1].processes[0]
    text = rendered(lambda out, w: console_on(out, w).print(frame(refresh_of(history), w)), width)
    check(text, width, [str(now.pid), *snapshot_figures(now)])


@pytest.fixture(scope="module")
def inside(holder):
    """--deep and --trim on the holder, through gdb."""
    from memgap.cli.inspect import snapshot_checked
    from memgap.errors import MemgapError
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
    from memgap.inside.gdb import deep, trim
    from memgap.sources.gdb_options import GdbOptions

    if not shutil.which("gdb"):
        pytest.skip("gdb is not installed")
    snap, identity = snapshot_checked(holder.pid, SnapshotOptions(regions=True), "/proc")
    started = identity.start_time
    try:
        found = deep(holder.pid, snap, started, GdbOptions())
        trimmed = trim(holder.pid, snap, started, GdbOptions())
    except MemgapError as exc:
        pytest.skip(f"gdb cannot attach here: {exc}")
    after = snapshot_pid(holder.pid, SnapshotOptions(regions=False))
    after.phase = "after-trim"
    return found, trimmed, after


@pytest.mark.parametrize("width", WIDTHS)
def test_deep_and_trim(inside, holder, width):
    from memgap.report.attach import render_after_trim, render_deep, render_trim

    found, trimmed, after = inside

    def render(out, w):
        render_deep(found, out, w)
        render_trim(holder.pid, trimmed, out, w)
        render_after_trim(after, out, w)

    text = rendered(render, width)
    figures = [mib(r[k]) for r in found.arenas for k in ("system_gdb", "system_outside", "free_gdb",
                                                         "free_resident_outside")]
    figures += [mib(trimmed.rss_before), mib(trimmed.rss_after), mib(trimmed.released)]
    # render_deep prints the in-process snapshot's layers only: its arenas are in the table above.
    check(text, width, figures + snapshot_figures(found.in_process, arenas=False) + [mib(after.rss)])


def _inside(cmd, env=None):
    """--deep and --trim through gdb on a program that says "ready" on its second line; yields
    (pid, deep result, trim record, the snapshot after the trim)."""
    from memgap.cli.inspect import snapshot_checked
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
    from memgap.inside.gdb import deep, trim
    from memgap.sources.gdb_options import GdbOptions

    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        proc.stdout.readline()
        assert proc.stdout.readline() == "ready\n"
        snap, identity = snapshot_checked(proc.pid, SnapshotOptions(regions=True), "/proc")
        started = identity.start_time
        found = deep(proc.pid, snap, started, GdbOptions())
        trimmed = trim(proc.pid, snap, started, GdbOptions())
        after = snapshot_pid(proc.pid, SnapshotOptions(regions=False))
        after.phase = "after-trim"
        yield proc.pid, found, trimmed, after
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _rendered_inside(inside, width):
    from memgap.report.attach import render_after_trim, render_deep, render_trim

    pid, found, trimmed, after = inside

    def render(out, w):
        render_deep(found, out, w)
        render_trim(pid, trimmed, out, w)
        render_after_trim(after, out, w)
    return rendered(render, width)


@pytest.fixture(scope="module")
def inside_jemalloc(je_stats_exe):
    """A program with jemalloc linked in (its mallctl)."""
    yield from _inside([je_stats_exe])


@pytest.mark.parametrize("width", WIDTHS)
def test_deep_and_trim_of_jemalloc(inside_jemalloc, width):
    text = _rendered_inside(inside_jemalloc, width)
    _, found, trimmed, after = inside_jemalloc
    j = found.figures["jemalloc"]
    figures = [mib(v) for v in (j.allocated, j.active, j.purgeable, j.metadata, j.resident, j.retained, j.mapped)]
    figures += [mib(trimmed.rss_before), mib(trimmed.rss_after), mib(trimmed.released)]
    check(text, width, figures + snapshot_figures(found.with_allocator, arenas=False) + [mib(after.rss)])


@pytest.fixture(scope="module", params=["tcmalloc", "mimalloc"])
def inside_tcmi(request, own_stats_exe):
    """A program under Debian's tcmalloc or mimalloc (their own C API)."""
    yield from _inside([own_stats_exe(request.param)], {**os.environ, "TCMALLOC_RELEASE_RATE": "0"})


@pytest.mark.parametrize("width", WIDTHS)
def test_deep_and_trim_of_tcmalloc_and_mimalloc(inside_tcmi, width):
    text = _rendered_inside(inside_tcmi, width)
    _, found, trimmed, after = inside_tcmi
    if "tcmalloc" in found.figures:
        t = found.figures["tcmalloc"]
        figures = [mib(v) for v in (t.allocated, t.pageheap_free, t.caches, t.metadata, t.pageheap_unmapped,
                                    t.heap_size, trimmed.details["estimate"])]
    else:
        m = found.figures["mimalloc"]
        figures = [mib(v) for v in (m.current_commit, m.peak_commit, m.current_rss, m.peak_rss,
                                    trimmed.details["own_after"]["current_commit"])]
    figures += [mib(trimmed.rss_before), mib(trimmed.rss_after), mib(trimmed.released)]
    check(text, width, figures + snapshot_figures(found.with_allocator, arenas=False) + [mib(after.rss)])
