"""memgap lab --memory-limit: each run in a memory cgroup of its own, its peak read there, and
the variants the limit OOM-kills told apart; on a real program whose variants differ in peak."""
import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import child_env
from helpers import memgap, memory_cgroup, recommended

MiB = 1 << 20

# Four threads take turns: each writes 2 x KEEP MiB in 16 KiB blocks and keeps every other one.
# Under glibc's defaults each thread has an arena of its own, and the holes one leaves cannot
# serve the next: about 8 x KEEP MiB at the peak. With glibc:arena_max=1 they share one arena,
# and each thread refills the holes of the one before: about 5 x KEEP MiB. No file is written
# during the burst (the cgroup also charges page cache, which VmHWM does not count); at its
# end the program writes its own VmHWM, which the test holds against its cgroup's peak.
BURST = r"""
import os, sys, threading
THREADS, KEEP_MIB, BLOCK = 4, 32, 16 << 10
kept, turns = [], [threading.Event() for _ in range(THREADS + 1)]

def work(i):
    turns[i].wait()
    blocks = [bytearray(BLOCK) for _ in range(2 * KEEP_MIB * (1 << 20) // BLOCK)]  # zero-filled: written
    kept.extend(blocks[::2])
    del blocks
    turns[i + 1].set()

threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
for t in threads:
    t.start()
turns[0].set()
for t in threads:
    t.join()
with open("/proc/self/status") as fh:
    hwm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
with open(os.path.join(sys.argv[1], "hwm-" + os.environ.get("MALLOC_ARENA_MAX", "default")), "w") as fh:
    fh.write(str(hwm))
"""
VARIANTS = ("glibc", "glibc:arena_max=1")
HWM_FILE = {"glibc": "hwm-default", "glibc:arena_max=1": "hwm-1"}


def _own_memory_cgroup():
    """This process's memory cgroup folder, v1 or v2 (memgap's children make theirs there)."""
    with open("/proc/self/cgroup") as fh:
        lines = [line.rstrip("\n").split(":", 2) for line in fh]
    v1 = next((path for _, ctrl, path in lines if "memory" in ctrl.split(",")), None)
    return f"/sys/fs/cgroup/memory{v1}" if v1 is not None else f"/sys/fs/cgroup{lines[-1][2]}"


@pytest.fixture(scope="module", autouse=True)
def writable_cgroup():
    """Each test makes memory cgroups (through memgap, or refused as another user): root and a
    writable memory controller, checked by making one here as the other cgroup tests do."""
    probe = memory_cgroup(f"memgap-test-memlimit-{os.getpid()}", 1 << 30) if os.geteuid() == 0 else None
    if probe is None:
        pytest.skip("needs root and a writable memory cgroup (v1 or v2): see tests/README.md")
    os.rmdir(probe)


def _run_cgroups_left(pid=None):
    """Run cgroups (memgap-run-PID-ORDER) of the lab ``pid``, else those whose lab has ended:
    left behind. Other tests' labs, running alongside, have theirs while they run."""
    names = [n for n in os.listdir(_own_memory_cgroup()) if n.startswith("memgap-run-")]
    if pid is not None:
        return [n for n in names if n.startswith(f"memgap-run-{pid}-")]
    return [n for n in names if not os.path.exists(f"/proc/{n.split('-')[2]}")]


def _burst_lab(folder, *args):
    """A lab of the two variants, one run each; returns (completed process, lab document, VmHWM by variant)."""
    folder.mkdir()
    script = folder / "burst.py"
    script.write_text(BURST)
    out = folder / "lab.json"
    cmd = ["lab", "--reps", "1", *[a for v in VARIANTS for a in ("--variant", v)], *args, "--json", str(out),
           "--dir", str(folder / "runs"), "--", sys.executable, str(script), str(folder)]
    proc = memgap(*cmd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hwm = {v: int((folder / f).read_text()) for v, f in HWM_FILE.items() if (folder / f).exists()}
    return proc, json.loads(out.read_text()), hwm


@pytest.fixture(scope="module")
def unlimited(tmp_path_factory):
    """The lab without a limit: each run still gets a cgroup of its own, for its peak."""
    return _burst_lab(tmp_path_factory.mktemp("memlimit") / "unlimited")


def test_each_run_gets_its_own_cgroup_and_its_peak_matches_the_programs_vmhwm(unlimited):
    _, lab, hwm = unlimited
    runs = {r["variant"]: r for r in lab["runs"]}
    assert lab["cgroup"] == {"limit": None, "per_run": True, "note": ""}
    for variant in VARIANTS:
        r = runs[variant]
        assert r["status"] == "ok" and r["cgroup_limit"] is None, r["note"]
        # the cgroup charges the program's anonymous memory and kernel memory; shared libraries
        # already in the page cache are charged where they were first read, VmHWM counts them
        assert abs(r["cgroup_peak"] - hwm[variant]) <= 0.10 * hwm[variant], (variant, r["cgroup_peak"], hwm)
    # the premise of the limit test: the two variants' peaks lie well apart
    assert runs["glibc"]["cgroup_peak"] > 1.3 * runs["glibc:arena_max=1"]["cgroup_peak"], runs
    assert not _run_cgroups_left()


def test_a_limit_between_the_peaks_kills_the_higher_variant_only(limited):
    limit, proc, lab, hwm = limited
    runs = {r["variant"]: r for r in lab["runs"]}
    page = 4096  # the kernel keeps the limit in pages
    assert lab["cgroup"]["limit"] == limit and all(r["cgroup_limit"] == limit for r in runs.values())
    killed, fits = runs["glibc"], runs["glibc:arena_max=1"]
    assert killed["status"] == "oom-killed" and killed["note"].startswith("at the limit"), killed
    assert limit - page <= killed["cgroup_peak"] <= limit  # it was charged up to the limit, not beyond
    assert "glibc" not in hwm  # it never reached its end
    assert fits["status"] == "ok" and abs(fits["cgroup_peak"] - hwm["glibc:arena_max=1"]) <= 0.10 * fits["cgroup_peak"]
    # a variant killed in any run is never the remedy; here the one that fits is
    assert recommended(lab) == "glibc:arena_max=1", lab["verdict"]
    assert "OOM-killed at the memory limit" in lab["verdict"]
    text = " ".join(proc.stdout.split())
    assert "OOM-killed at the limit: glibc (1 of 1 run)" in text and "cgroup peak" in text, proc.stdout
    assert not _run_cgroups_left()


@pytest.mark.parametrize("bad", ["0", "-5", "lots", "1.5X"])
def test_a_bad_memory_limit_is_one_line_and_exit_2(bad):
    proc = memgap("lab", "--memory-limit", bad, "--", "true")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--memory-limit" in proc.stderr and "is not a size" in proc.stderr, proc.stderr


def test_where_no_cgroup_can_be_made_the_lab_refuses_before_any_run(tmp_path):
    """As an unprivileged user memgap's cgroup is not writable: one line, exit 5, no run made."""
    marker = f"/tmp/memgap-memlimit-ran-{os.getpid()}"
    env = child_env(HOME="/tmp")
    proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-m",
                           "memgap", "lab", "--memory-limit", "1G", "--reps", "1", "--variant", "glibc", "--",
                           "/bin/sh", "-c", f"touch {marker}"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--memory-limit: cannot make a memory cgroup" in proc.stderr and "root" in proc.stderr, proc.stderr
    assert not os.path.exists(marker) and proc.stdout == ""


@pytest.fixture(scope="module")
def limited(unlimited, tmp_path_factory):
    """The lab with a limit between the two variants' peaks (measured by the unlimited lab)."""
    peaks = {r["variant"]: r["cgroup_peak"] for r in unlimited[1]["runs"]}
    limit = (peaks["glibc"] + peaks["glibc:arena_max=1"]) // 2
    return (limit, *_burst_lab(tmp_path_factory.mktemp("memlimit") / "limited", "--memory-limit", str(limit)))


@pytest.mark.parametrize("width", (50, 80, 120))
def test_the_limited_lab_keeps_every_figure_whole(limited, width):
    from test_widths import _lab_figures, check, copy_lines, rendered

    from memgap.documents.records import LabDocument
    from memgap.report.lab import cgroup_lines, render_lab

    lab = limited[2]
    figures = _lab_figures(lab)
    assert len(figures) == 8  # idle, cgroup peak, slowdown and verdict of the two variants
    doc = LabDocument.from_dict(lab)
    text = rendered(lambda out, w: render_lab(doc, out, w), width)
    check(text, width, figures, copy_lines(lab["recommendation"]))
    assert " ".join(cgroup_lines(doc)[0].split()) in " ".join(text.split())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_lab_stopped_midway_leaves_no_cgroup_nor_process(tmp_path, sig):
    """Ctrl-C (or a SIGTERM) while a run is under way: the run's tree is stopped and its cgroup
    removed before memgap exits."""
    lab = subprocess.Popen([sys.executable, "-m", "memgap", "lab", "--memory-limit", "1G", "--reps", "1",
                            "--variant", "glibc", "--dir", str(tmp_path / "runs"), "--", sys.executable, "-c",
                            "import time; time.sleep(60)"], env=child_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (workload := _workload_in_cgroup(lab.pid)):
            assert time.monotonic() < deadline and lab.poll() is None, lab.communicate()
            time.sleep(0.05)
        lab.send_signal(sig)
        _, err = lab.communicate(timeout=30)
    finally:
        lab.kill()
    assert lab.returncode == 130 and "interrupted" in err, err
    assert not _run_cgroups_left(lab.pid)
    assert not [pid for pid in workload if os.path.exists(f"/proc/{pid}")]


def _pids_in(name):
    """The processes in a cgroup; none where it is gone (removed as it was listed: ENOENT, or ENODEV once
    removed while open)."""
    try:
        with open(os.path.join(_own_memory_cgroup(), name, "cgroup.procs")) as fh:
            return [int(line) for line in fh if line.strip()]
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV):
            return []
        raise


def _workload_in_cgroup(pid):
    """The processes in the lab ``pid``'s run cgroup, once one holds some. Its probe cgroup (made and removed
    at once, to learn whether a cgroup can be made) holds none: fresh clone 13 read one as it was removed."""
    return next((pids for name in _run_cgroups_left(pid) if not name.endswith("-probe")
                 if (pids := _pids_in(name))), [])


def test_a_run_that_cannot_start_leaves_no_cgroup(tmp_path):
    proc = memgap("lab", "--memory-limit", "1G", "--reps", "1", "--variant", "glibc", "--dir", str(tmp_path),
                  "--", "/nonexistent/program")
    assert proc.returncode == 1 and "cannot run '/nonexistent/program'" in proc.stderr, proc.stderr
    assert not _run_cgroups_left()


def test_the_lab_folder_alone_tells_the_limit_and_the_kills_again(limited):
    limit, _, lab, _ = limited
    proc = memgap("report", lab["lab_dir"])
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert f"limited to {round(limit / MiB)} MiB. OOM-killed at the limit: glibc (1 of 1 run)" in text, proc.stdout
