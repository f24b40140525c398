"""Shared memory as its own layer (issue 22), and findings that weigh a process by its own memory.

Programs: programs/shared_mem.c (knows nothing of memgap): a parent and 3 forked children
mapping anonymous MAP_SHARED memory (what PostgreSQL's shared buffers are), POSIX shared
memory, a SysV segment and a memfd; and one process with shared memory beside free memory
glibc keeps. A plain Python script under `memgap run` for the in-process route. Witnesses:
the processes' smaps (Rss, Pss, private bytes of each mapping) read by the test, VmRSS, the
program's own count of what it freed and the VmRSS drop of its own malloc_trim(0).
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import HERE
from helpers import MiB, build_c, memgap, run_recorded

KiB = 1 << 10
FLOOR = 16 * MiB  # diagnose/findings.py's byte floor, written out here (a test that read it would move with it)
SHARE = 0.20      # ...and its share
SHARED_MEM_C = os.path.join(HERE, "programs", "shared_mem.c")


@pytest.fixture(scope="module")
def shared_mem_exe(tmp_path_factory):
    return build_c(tmp_path_factory, "shared_mem")


def smaps(pid):
    """Each mapping of ``pid``: (path, {field: bytes}), read from /proc/PID/smaps here."""
    out = []
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            words = rest.split()
            if " " not in name and len(words) == 2 and words[1] == "kB":
                out[-1][1][name] = int(words[0]) * KiB
            elif re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                out.append((line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else "", {}))
    return out


def kind_of(path, parent):
    """The kind of one of shared_mem.c's mappings, by the path the kernel gives it; None for others."""
    if path == "/dev/zero (deleted)":
        return "anonymous"
    if path.startswith("/SYSV"):
        return "sysv"
    if path == f"/dev/shm/memgap-test-{parent}":
        return "posix"
    if path.startswith("/memfd:memgap-test"):
        return "memfd"
    return None


def shared_witness(pid, parent):
    """Of the program's shared mappings in ``pid``, by the kernel: Rss by kind, and Rss and Pss summed."""
    by_kind, rss, pss = {}, 0, 0
    for path, fields in smaps(pid):
        kind = kind_of(path, parent)
        if kind:
            by_kind[kind] = by_kind.get(kind, 0) + fields["Rss"]
            rss, pss = rss + fields["Rss"], pss + fields["Pss"]
    return by_kind, rss, pss


def within(got, want, share=0.02):
    return abs(got - want) <= share * want


@pytest.fixture(scope="module")
def tree(shared_mem_exe):
    """A parent and its 3 children, each with 256 MiB of anonymous MAP_SHARED memory, 32 MiB of POSIX
    shared memory, a 32 MiB SysV segment and a 16 MiB memfd, every page read."""
    proc = subprocess.Popen([shared_mem_exe, "tree", "256", "32", "32", "16"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    pids = [int(w) for w in proc.stdout.readline().split()[1:]]
    assert proc.stdout.readline() == "ready\n" and len(pids) == 4, pids
    yield pids
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_each_process_holds_the_shared_memory_and_the_tree_counts_it_once(tree):
    parent = tree[0]
    doc = json.loads(memgap("inspect", str(parent), "--tree", "--json", "-").stdout)
    by_pid = {p["pid"]: p for p in doc["processes"]}
    assert set(by_pid) == set(tree)
    pss_sum = 0
    for pid in tree:
        by_kind, rss, pss = shared_witness(pid, parent)
        assert rss >= 330 * MiB, (pid, by_kind)  # every page read: the case
        layer = by_pid[pid]["layers"]["shared_memory"]
        assert within(layer["resident"], rss), (pid, layer["resident"], rss)
        for kind, resident in by_kind.items():
            assert within(layer["detail"][kind], resident), (pid, kind, layer["detail"], by_kind)
        assert layer["detail"]["mappings"] == 4, layer["detail"]
        # not files: those are the program and its libraries, a few MiB
        assert by_pid[pid]["layers"]["files"]["resident"] < 8 * MiB, by_pid[pid]["layers"]["files"]
        # the kernel's own count of shared memory pages (RssShmem), in the same snapshot
        assert within(layer["resident"], by_pid[pid]["status"]["RssShmem"]), (layer, by_pid[pid]["status"])
        pss_sum += pss
    # counted once across the tree: each process's PSS of it, summed, against the kernel's
    layers_pss = sum(by_pid[pid]["layers"]["shared_memory"]["pss"] for pid in tree)
    assert within(layers_pss, pss_sum), (layers_pss, pss_sum)
    assert doc["totals"]["layers_by"] == "pss" and doc["totals"]["layers"]["shared_memory"] == layers_pss
    assert within(layers_pss, 336 * MiB), layers_pss / MiB  # once, not 4 times
    (finding,) = [f for f in doc["findings"] if f["code"] == "shared-memory"]
    said = float(re.search(r"shared buffers: ([\d.]+) MiB", finding["summary"]).group(1))
    assert abs(said * MiB - layers_pss) <= 0.1 * MiB, finding
    # and each process's own finding says its PSS of it
    own = [f for f in by_pid[parent]["findings"] if f["code"] == "shared-memory"]
    assert own and f"PSS {by_pid[parent]['layers']['shared_memory']['pss'] / MiB:.1f} MiB here" in own[0]["summary"]
    # the text: a column of its own, the tree's finding once
    text = memgap("inspect", str(parent), "--tree").stdout
    assert "shmem" in text and text.count("shared buffers:") == 1, text


def test_regions_name_shared_memory_not_files(tree):
    parent = tree[0]
    text = memgap("inspect", str(parent), "--regions").stdout
    # "START-END PERMS N KiB OWNER PATH"
    lines = [line for line in text.splitlines() if line.startswith("0x") and kind_of(line.split(None, 5)[5], parent)]
    assert len(lines) == 4, text
    assert all(line.split()[4] == "shmem" for line in lines), lines
    doc = json.loads(memgap("inspect", str(parent), "--regions", "--json", "-").stdout)
    owners = {r["path"]: r["owner"] for r in doc["regions"] if kind_of(r["path"], parent)}
    assert len(owners) == 4 and set(owners.values()) == {"shmem"}, owners
    assert list(doc["layers"])[:2] == ["files", "shared_memory"]
    assert doc["layers"]["files"]["detail"]["shmem"] == doc["layers"]["shared_memory"]["resident"]


def test_top_tree_shows_the_layer_summed_by_pss(tree):
    proc = memgap("top", str(tree[0]), "--tree", "--iterations", "1")
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "shared memory" in line)
    shown = float(re.search(r"│\s*([\d.]+)\s*│", row.split("shared memory", 1)[1]).group(1))
    kernel = sum(shared_witness(pid, tree[0])[2] for pid in tree)
    assert within(shown * MiB, kernel, 0.02), (row, kernel / MiB)


SHARED_PY = """
import mmap, re
SIZE = 48 << 20
buffers = mmap.mmap(-1, SIZE)  # MAP_SHARED | MAP_ANONYMOUS
for i in range(0, SIZE, 4096):
    buffers[i] = 1
with open("/proc/self/smaps") as fh:
    text = fh.read()
block = text.split("/dev/zero (deleted)", 1)[1]
print("rss", int(re.search(r"Rss:\\s+(\\d+) kB", block).group(1)) * 1024, flush=True)
import memgap
memgap.phase("mapped")  # a program that marks its phases: its snapshots, its exit's too, are in-process
"""


def test_in_process_the_layer_is_there_too(tmp_path):
    script = tmp_path / "shared.py"
    script.write_text(SHARED_PY)
    proc, run = run_recorded(tmp_path, [sys.executable, str(script)])
    said = int(re.search(r"rss (\d+)", proc.stdout).group(1))
    assert said == 48 * MiB
    (process,) = run["processes"]
    snaps = [s for s in process["snapshots"] if s["route"] == "in-process"]
    assert snaps, [s["route"] for s in process["snapshots"]]
    for snap in snaps:
        layer = snap["layers"]["shared_memory"]
        assert within(layer["resident"], said) and layer["pss"] is None, layer
        assert within(layer["detail"]["anonymous"], said), layer["detail"]
        assert layer["resident"] + snap["layers"]["files"]["resident"] <= \
            snap["status"]["RssFile"] + snap["status"]["RssShmem"] + MiB, snap["status"]


# --- findings: a process judged by its own memory -------------------------------------------------

class Retaining:
    """shared_mem.c retain: SHARED MiB of shared memory, FREE MiB freed and kept by glibc."""

    def __init__(self, exe, shared, free):
        self.proc = subprocess.Popen([exe, "retain", str(shared), str(free)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        said = dict(w.split("=") for w in self.proc.stdout.readline().split())
        self.freed, self.kept = int(said["freed"]), int(said["kept"])
        assert self.proc.stdout.readline() == "ready\n"

    def trim(self):
        self.proc.stdin.write("trim\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split("=")[1])

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def retaining(shared_mem_exe):
    started = []

    def start(shared, free):
        started.append(Retaining(shared_mem_exe, shared, free))
        return started[-1]

    yield start
    for r in started:
        r.close()


def own_memory(pid):
    """The process's private bytes outside its shared memory, by smaps read here."""
    return sum(fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
               for path, fields in smaps(pid) if path != "/dev/zero (deleted)")


def test_free_memory_behind_shared_memory_is_weighed_against_its_own(retaining):
    r = retaining(200, 20)
    doc = json.loads(memgap("inspect", str(r.proc.pid), "--json", "-").stdout)
    own = own_memory(r.proc.pid)
    rss = doc["rss"]
    # the case: under the share of RSS, over it of its own memory
    assert r.freed < SHARE * rss and r.freed >= SHARE * own and r.freed >= FLOOR, (r.freed, rss, own)
    f = next(f for f in doc["findings"] if f["code"] == "glibc-retention")
    free = float(re.search(r"holds ([\d.]+) MiB of free pages", f["summary"]).group(1)) * MiB
    assert r.freed - 0.5 * MiB <= free <= r.freed + 0.1 * MiB, (f, r.freed)
    m = re.search(r"\((\d+)% of its private memory, ([\d.]+) MiB\)", f["evidence"][0])
    assert m, f["evidence"]
    share, base = int(m.group(1)), float(m.group(2)) * MiB
    assert abs(base - own) <= 0.03 * own + 0.25 * MiB, (base, own)
    assert abs(share - 100 * free / base) <= 1, f["evidence"][0]
    assert "ratio over its private memory" in f["evidence"][1], f["evidence"]
    # "a trim would release ~R MiB": what the program's own malloc_trim(0) then released, by VmRSS
    releasable = float(re.search(r"release ~([\d.]+) MiB", f["summary"]).group(1)) * MiB
    released = r.trim()
    assert abs(releasable - released) <= 256 * KiB, (f["summary"], released)
    info = next(f for f in doc["findings"] if f["code"] == "shared-memory")
    assert "200.0 MiB of shared memory" in info["summary"], info


@pytest.mark.parametrize("free,why", [(0, "nothing free"), (12, "under the byte floor")])
def test_no_finding_without_free_memory_of_its_own(retaining, free, why):
    r = retaining(200, free)
    if free:  # over the share of its own memory: only the byte floor holds it
        assert r.freed < FLOOR and r.freed >= SHARE * own_memory(r.proc.pid), (r.freed, why)
    doc = json.loads(memgap("inspect", str(r.proc.pid), "--json", "-").stdout)
    assert "glibc-retention" not in {f["code"] for f in doc["findings"]}, doc["findings"]
    assert abs(doc["layers"]["allocator_free"]["resident"] - r.freed) <= 0.5 * MiB, doc["layers"]["allocator_free"]


def test_a_tree_shows_each_process_own_findings(retaining):
    r = retaining(200, 20)
    text = " ".join(memgap("inspect", str(r.proc.pid), "--tree").stdout.split())
    assert f"PID {r.proc.pid}: glibc holds" in text and "of its private memory" in text, text


# --- a real PostgreSQL: its shared buffers are anonymous MAP_SHARED memory ----------------------

def _postgres_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def _as_postgres(cmd, **kw):
    """``cmd`` as the postgres user (PostgreSQL refuses to run as root)."""
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.Popen(cmd, **kw)


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of the test's own (shared_buffers 256MB, a Unix socket only) with
    pgbench's tables at scale 4 (51 MiB: under a quarter of the buffers, so a sequential scan
    reads them into the buffers rather than through a small ring), and 3 sessions that each read
    every page of them and stay connected: (postmaster PID, the 3 backends' PIDs)."""
    bindir = _postgres_bin()
    if bindir is None or shutil.which("psql") is None or shutil.which("pgbench") is None:
        pytest.skip("no PostgreSQL server (apt-get install postgresql: scripts/setup.sh does)")
    if os.geteuid() == 0 and subprocess.run(["id", "postgres"], capture_output=True).returncode:
        pytest.skip("no postgres user to run PostgreSQL as (root cannot)")
    base = tempfile.mkdtemp(prefix="memgap-pg-")
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    data, sock = os.path.join(base, "data"), base
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    assert _as_postgres([f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres"], **quiet).wait(60) == 0
    server = _as_postgres([f"{bindir}/postgres", "-D", data, "-k", sock, "-p", "5432", "-c", "listen_addresses=",
                           "-c", "shared_buffers=256MB"], **quiet)
    sessions = []
    try:
        connect = ["-h", sock, "-p", "5432", "-U", "postgres", "postgres"]
        for _ in range(100):
            if _as_postgres(["pg_isready", *connect[:-1]], stdout=subprocess.DEVNULL).wait(10) == 0:
                break
            time.sleep(0.1)
        assert _as_postgres(["pgbench", "-i", "-s", "4", *connect], **quiet).wait(300) == 0
        for _ in range(3):
            s = _as_postgres(["psql", "-X", "-A", "-t", *connect], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
            s.stdin.write("SELECT pg_backend_pid(), sum(abalance) FROM pgbench_accounts;\n")
            s.stdin.flush()
            sessions.append((s, int(s.stdout.readline().split("|")[0])))
        with open(os.path.join(data, "postmaster.pid")) as fh:
            postmaster = int(fh.readline())
        yield postmaster, [pid for _, pid in sessions]
    finally:
        for s, _ in sessions:
            s.stdin.close()
            s.wait(30)
        pidfile = os.path.join(data, "postmaster.pid")
        if os.path.exists(pidfile):  # runuser's child, which it does not signal
            with open(pidfile) as fh:
                os.kill(int(fh.readline()), signal.SIGINT)  # a fast shutdown: it removes its shared memory
        server.wait(60)
        shutil.rmtree(base, ignore_errors=True)


def test_postgresql_shared_buffers_are_shared_memory(postgres):
    postmaster, backends = postgres
    doc = json.loads(memgap("inspect", str(postmaster), "--tree", "--json", "-").stdout)
    by_pid = {p["pid"]: p for p in doc["processes"]}
    assert set(backends) <= set(by_pid), (backends, list(by_pid))
    rss = {pid: sum(f["Rss"] for path, f in smaps(pid) if path.startswith(("/dev/zero", "/SYSV", "/dev/shm/")))
           for pid in by_pid}
    pss = sum(f["Pss"] for pid in by_pid for path, f in smaps(pid)
              if path.startswith(("/dev/zero", "/SYSV", "/dev/shm/")))
    for pid in backends:  # each read its 51 MiB of tables through the shared buffers
        layer = by_pid[pid]["layers"]["shared_memory"]
        assert rss[pid] >= 48 * MiB and within(layer["resident"], rss[pid]), (pid, layer["resident"], rss[pid])
        assert within(layer["detail"]["anonymous"], layer["resident"], 0.05), layer["detail"]
        assert by_pid[pid]["layers"]["files"]["resident"] < 0.5 * layer["resident"], by_pid[pid]["layers"]["files"]
    layers_pss = sum(p["layers"]["shared_memory"]["pss"] for p in doc["processes"])
    assert within(layers_pss, pss), (layers_pss, pss)
    assert "shared-memory" in {f["code"] for f in doc["findings"]}, doc["findings"]
