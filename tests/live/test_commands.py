"""The commands and flags test_cli.py leaves out (issue 17, item 5), on real processes: demo,
snapshot, agent, --markdown, --show-output, inspect --regions, run --walk, Ctrl-C on a run, a
run recorded twice to the same --json, and top on a target that exits between refreshes.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import HERE, child_env
from helpers import MiB, check_adds_up, memgap, vmrss

KiB = 1 << 10
FINDINGS_PY = os.path.join(HERE, "programs", "findings.py")


def one_line_error(proc, code):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("memgap: "), proc.stderr
    return proc.stderr


def cli(capsys, *args):
    """memgap's CLI in this process (no interpreter to start): exit code, stdout, stderr."""
    from memgap.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- demo ----------------------------------------------------------------------------------------

# the scenarios' knobs, small (MEMGAP_<KNOB> in the environment): a second or two each
DEMOS = {
    "trie": {"MEMGAP_WORDS": "20000", "MEMGAP_REST": "0.1"},
    "": {"MEMGAP_THREADS": "2", "MEMGAP_CHUNKS": "8", "MEMGAP_PASSES": "1", "MEMGAP_PAYLOAD_KIB": "64",
         "MEMGAP_REST": "0.1"},  # no name: the default scenario
}


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    where = tmp_path_factory.mktemp("demo")

    def demo(name):
        out = where / f"{name or 'default'}.json"
        proc = memgap("demo", *([name] if name else []), "--interval", "0.5", "--json", str(out),
                      env=child_env(**DEMOS[name]))
        return name, (proc, json.loads(out.read_text()) if out.exists() else None)

    with ThreadPoolExecutor(len(DEMOS)) as pool:
        return dict(pool.map(demo, DEMOS))


def test_demo_runs_the_scenario_under_run_and_explains_it(demos):
    from memgap.scenarios import SCENARIOS

    proc, run = demos["trie"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = SCENARIOS["trie"]
    assert proc.stderr.startswith(f"memgap demo: trie (seed {info.seed}): {info.summary}\n"), proc.stderr
    assert run["schema"] == "memgap.run/1" and run["complete"] and run["exit_code"] == 0
    assert run["cmd"] == [sys.executable, "-m", "memgap.scenarios.trie"]
    (process,) = run["processes"]
    snaps = {s["phase"]: s for s in process["snapshots"]}
    assert list(snaps) == [*info.phases, "exit"]
    # the scenario prints its own VmRSS at each phase ("memgap-phase: NAME rss_kib=N") just before
    # memgap.phase(NAME): the recorded snapshots are of those moments
    own = {m[1]: int(m[2]) * KiB for m in re.finditer(r"^memgap-phase: (\S+) rss_kib=(\d+)$", proc.stdout, re.M)}
    assert list(own) == list(info.phases), proc.stdout[:2000]
    for phase, rss in own.items():
        assert abs(snaps[phase]["rss"] - rss) <= MiB, (phase, snaps[phase]["rss"], rss)
    # what seed 002 is about, found: the pruned trie leaves pymalloc's arenas mostly free
    idle = snaps["idle"]
    assert "pymalloc-fragmentation" in {f["code"] for f in idle["findings"]}
    assert "pymalloc holds" in proc.stdout and "recording complete" in proc.stdout


def test_demo_without_a_name_is_the_thread_pool(demos):
    proc, run = demos[""]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.startswith("memgap demo: threadpool (seed 000): "), proc.stderr
    assert run["cmd"] == [sys.executable, "-m", "memgap.scenarios.threadpool"] and run["complete"]
    phases = [s["phase"] for p in run["processes"] for s in p["snapshots"]]
    assert phases == ["post-import", "post-session", "post-pass-1", "idle", "exit"], phases


# --- snapshot ------------------------------------------------------------------------------------

def test_snapshot_explains_memgaps_own_process(tmp_path, capsys):
    out = tmp_path / "snap.json"
    proc = subprocess.Popen([sys.executable, "-m", "memgap", "snapshot", "--json", str(out)], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and not stderr, stderr
    snap = json.loads(out.read_text())
    assert snap["pid"] == proc.pid and snap["route"] == "in-process" and "regions" not in snap
    check_adds_up(snap)  # against the kernel's RssAnon and RssFile, read in the same snapshot
    # in its own process memgap reads Python's statistics, and walks the gc
    assert snap["python_heap"]["source"] == "gc-walk"
    assert snap["layers"]["python_objects"]["resident"] >= snap["pymalloc"]["allocated_blocks_bytes"] * 0.5
    # the table, for the same snapshot, after the JSON
    title = stdout.splitlines()[0]
    assert title.startswith(f"PID {proc.pid}: RSS {snap['rss'] / MiB:.1f} MiB (in-process, allocator glibc)"), title
    assert "Python objects" in stdout and "RSS (VmRSS)" in stdout
    # --json - : the JSON alone on stdout (here of this test's process)
    code, only, _ = cli(capsys, "snapshot", "--json", "-")
    assert code == 0 and json.loads(only)["pid"] == os.getpid()


# --- agent ---------------------------------------------------------------------------------------

def test_agent_prints_a_library_that_works_as_it_says(capsys):
    code, path, _ = cli(capsys, "agent", "--path")
    assert code == 0
    library = path.strip()
    assert path == library + "\n"  # one line: for LD_PRELOAD=$(memgap agent --path)
    with open(library, "rb") as fh:
        head = fh.read(18)
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[16:18], "little") == 3  # ET_DYN: a shared object
    code, told, _ = cli(capsys, "agent")
    assert code == 0
    assert told.splitlines()[0] == f"agent library: {library}"
    preload = next(line.strip() for line in told.splitlines() if line.strip().startswith("LD_PRELOAD="))
    *assignments, program, dots = preload.split()
    assert (program, dots) == ("PROGRAM", "...") and assignments == [f"LD_PRELOAD={library}", "MEMGAP_AGENT=on"]
    # Do as it says, with a program that is not Python, and the socket where it says it is
    env = child_env(**dict(a.split("=", 1) for a in assignments))
    env.pop("MEMGAP_AGENT_DIR", None)
    target = subprocess.Popen(["sleep", "30"], env=env)
    try:
        socket = f"/tmp/memgap-agent-{os.getuid()}/agent-{target.pid}.sock"
        assert "/tmp/memgap-agent-UID, as agent-PID.sock" in told
        deadline = time.monotonic() + 10
        while not os.path.exists(socket) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.stat(socket).st_mode & 0o777 == 0o600
        code, seen, _ = cli(capsys, "inspect", str(target.pid), "--json", "-")
        assert code == 0
        snap = json.loads(seen)
        assert snap["route"] == "outside, with the agent" and snap["allocator"]["agent"], snap["allocator"]
    finally:
        target.kill()
        target.wait()


# --- lab --markdown and --show-output ----------------------------------------------------------------

# holds 30 MiB at its idle and prints its own VmRSS there; the marker is built at run time,
# so that the command line memgap prints in its header does not contain it
WORKLOAD = ("import memgap\n"
            "held = b'\\x01' * (30 << 20)\n"
            "rss = next(int(l.split()[1]) << 10 for l in open('/proc/self/status') if l.startswith('VmRSS:'))\n"
            "print('workload-' + 'says', rss, flush=True)\n"
            "memgap.phase('idle')\n")


def test_lab_markdown_and_show_output(tmp_path):
    md, lab_json = tmp_path / "lab.md", tmp_path / "lab.json"
    shown = memgap("lab", "--variant", "glibc", "--reps", "1", "--markdown", str(md), "--json", str(lab_json),
                   "--show-output", "--", sys.executable, "-c", WORKLOAD)
    assert shown.returncode == 0, shown.stderr[-2000:]
    said = re.search(r"^workload-says (\d+)$", shown.stdout, re.M)
    assert said, shown.stdout[:2000]  # --show-output: the workload printed to memgap's own output
    own_rss = int(said[1])
    lines = md.read_text().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    # a "cgroup peak" column joins where each run could get a memory cgroup of its own (root here); the mean
    # over the work is shown whatever judged (docs/commands/lab.md): this lab judged by idle, and said why
    assert [h for h in header if h != "cgroup peak"] == ["variant", "first phase", "peak", "work mean", "idle",
                                                         "after trim", "wall s", "slowdown", "pattern",
                                                         "verdict"], header
    assert lines[1] == "|" + "---|" * len(header)
    assert len(lines) == 3 and lines[2].startswith("| `glibc` | "), lines
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    idle = re.fullmatch(r"(\d+) \((\d+)-(\d+)\)", cells[header.index("idle")])
    assert idle, cells
    # one run: median, min and max are its idle RSS, the workload's own VmRSS at its idle phase
    assert idle[1] == idle[2] == idle[3] and abs(int(idle[1]) * MiB - own_rss) <= 1.5 * MiB, (cells, own_rss)
    assert cells[-1] == "baseline"
    # the mean over the work, one run's: never above that run's peak
    mean, peak = (re.fullmatch(r"(\d+) \((\d+)-(\d+)\)", cells[header.index(h)]) for h in ("work mean", "peak"))
    assert mean and peak and mean[1] == mean[2] == mean[3] and 0 < int(mean[1]) <= int(peak[1]), cells
    assert "Judged by the idle" in " ".join(shown.stdout.split()), shown.stdout[-2000:]
    # the same table again from the lab's JSON
    again = memgap("report", str(lab_json), "--markdown", str(tmp_path / "again.md"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again.md").read_text() == md.read_text()
    # without --show-output the workload's output goes nowhere
    quiet = memgap("lab", "--variant", "glibc", "--reps", "1", "--", sys.executable, "-c", WORKLOAD)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "workload-says" not in quiet.stdout + quiet.stderr


# --- inspect --regions ---------------------------------------------------------------------------

MAPS_SOME = (
    "import ctypes, mmap, sys\n"
    "anon = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "anon.write(b'\\x01' * len(anon))\n"
    "f = open(sys.argv[1], 'rb')\n"
    "mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
    "total = sum(mapped[i] for i in range(0, len(mapped), 4096))\n"
    "address = lambda m: ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
    "print(address(anon), flush=True)\n"
    "sys.stdin.readline()\n"
)
REGION = re.compile(r"^0x([0-9a-f]+)-0x([0-9a-f]+) (\S{4}) +(\d+) KiB  (\S+) +(.*)$")


def test_inspect_regions_prints_the_labelled_map(tmp_path, capsys):
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(3 * MiB))
    target = subprocess.Popen([sys.executable, "-c", MAPS_SOME, str(data)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        anon_at = int(target.stdout.readline())
        code, text, _ = cli(capsys, "inspect", str(target.pid), "--regions")
        rss = vmrss(target.pid)  # the target is idle: the same figure memgap read
        as_json = cli(capsys, "inspect", str(target.pid), "--regions", "--json", "-")
        plain = cli(capsys, "inspect", str(target.pid), "--json", "-")
        table_only = cli(capsys, "inspect", str(target.pid))
    finally:
        target.kill()
        target.wait()
    assert code == 0
    regions = [REGION.match(line) for line in text.splitlines()]
    regions = [m for m in regions if m]
    starts = [int(m[1], 16) for m in regions]
    assert len(regions) > 10 and starts == sorted(starts)
    # the 8 MiB the program wrote, as its own region, and the file it read, by name
    (anon,) = [m for m in regions if int(m[1], 16) == anon_at]
    assert int(anon[4]) == 8 * 1024 and anon[5] == "anon", anon.groups()
    (mapped,) = [m for m in regions if m[6] == str(data)]
    assert int(mapped[4]) == 3 * 1024 and mapped[5] == "file" and mapped[3] == "r--s", mapped.groups()
    # every resident page is in one region: they add up to the kernel's VmRSS
    assert abs(sum(int(m[4]) * KiB for m in regions) - rss) <= MiB, (rss, len(regions))
    # --json with --regions keeps them; without, neither the JSON nor the text has them
    assert as_json[0] == plain[0] == table_only[0] == 0
    kept = json.loads(as_json[1])["regions"]
    assert (anon_at, anon_at + 8 * MiB, "anon", 8 * MiB) in {(r["start"], r["end"], r["owner"], r["resident"])
                                                           for r in kept}
    assert "regions" not in json.loads(plain[1])
    assert not any(REGION.match(line) for line in table_only[1].splitlines())
    assert "RSS (VmRSS)" in table_only[1] and "RSS (VmRSS)" in text


# --- run --walk ----------------------------------------------------------------------------------

def test_run_walk_counts_large_buffers_as_python_objects(tmp_path):
    """24 MiB held in 64 KiB bytearrays (over pymalloc's 512 bytes: malloc's): with --walk the phase
    snapshot finds them from the gc and shows them as Python objects; without, they are the C
    allocator's, in use."""
    docs = {}
    for walk in (True, False):
        out = tmp_path / f"walk-{walk}.json"
        proc = memgap("run", *(["--walk"] if walk else []), "--interval", "0.5", "--json", str(out), "--",
                      sys.executable, FINDINGS_PY, "phases", "held:buffers+24")
        assert proc.returncode == 0, proc.stderr[-2000:]
        witness = json.loads(next(line for line in proc.stderr.splitlines() if line.startswith("witness "))[8:])
        (process,) = json.loads(out.read_text())["processes"]
        docs[walk] = next(s for s in process["snapshots"] if s["phase"] == "held")
    held = witness["buffers"]  # the program's own count: 384 buffers of 64 KiB
    walked, plain = docs[True], docs[False]
    assert walked["python_heap"]["source"] == "gc-walk" and plain["python_heap"] is None
    assert walked["python_heap"]["large_buffers_bytes"] >= held
    assert walked["python_heap"]["large_buffers_count"] >= held // (64 * KiB)
    objects = {w: d["layers"]["python_objects"]["resident"] for w, d in docs.items()}
    in_use = {w: d["layers"]["allocator_in_use"]["resident"] for w, d in docs.items()}
    assert abs((objects[True] - objects[False]) - held) <= MiB, (objects, held)
    assert abs((in_use[False] - in_use[True]) - held) <= MiB, (in_use, held)


# --- Ctrl-C on memgap run ------------------------------------------------------------------------

PHASES_THEN_WAIT = ("import memgap, os, time\n"
                    "for i in range(3):\n"
                    "    memgap.phase(f'step-{i}')\n"
                    "print(os.getpid(), flush=True)\n"
                    "time.sleep(60)\n")


@pytest.mark.parametrize("how", ["terminal", "memgap-only", "no-json"])
def test_ctrl_c_on_run_keeps_the_recording_and_ends_the_child(tmp_path, capsys, how):
    """terminal: Ctrl-C in a terminal, SIGINT to the whole foreground group, memgap and the
    command; memgap-only: `kill -INT` to memgap alone, which must stop the command itself;
    no-json: the terminal's, without --json (the recording in a temporary folder)."""
    script = tmp_path / "phases.py"
    script.write_text(PHASES_THEN_WAIT)
    out = tmp_path / "run.json"
    json_args = [] if how == "no-json" else ["--json", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "memgap", "run", "--interval", "0.05", *json_args, "--",
                             sys.executable, str(script)], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(proc.stdout.readline())  # the command's first line: its phases are recorded
        time.sleep(0.1)  # a sample or two of it waiting
        if how == "memgap-only":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert stderr.endswith("memgap: interrupted\n") and "memgap run: interrupted" in stderr, stderr
    assert "Traceback" not in stderr.split("memgap run: interrupted")[1]  # none of memgap's own
    # the command is gone: not running, not stopped, not a zombie (memgap reaped it)
    assert not os.path.exists(f"/proc/{child}"), Path(f"/proc/{child}/stat").read_text()
    # memgap said where the recording is, and memgap report reads it back
    told = re.search(r"the recording so far is in (\S+) \(memgap report \1\)", stderr)
    assert told, stderr
    record_dir = told[1]
    assert record_dir == (str(out) + ".d" if json_args else record_dir)
    code, shown, _ = cli(capsys, "report", record_dir, "--json", str(tmp_path / "again.json"))
    assert code == 0
    assert "cut short" in shown and "step-2" in shown
    run = json.loads((tmp_path / "again.json").read_text())
    assert not run["complete"] and run["timeline"]
    phases = [s["phase"] for p in run["processes"] for s in p["snapshots"]]
    assert phases[:3] == ["step-0", "step-1", "step-2"], phases
    if how != "memgap-only":  # the command got the Ctrl-C too, and had the time to write its own exit
        assert phases[3:] and phases[-1] in ("exit", "before-exit"), phases
    assert {t["pid"] for t in run["timeline"]} == {child}
    assert "recording cut short" in stdout  # the run as far as it went, shown
    if json_args:  # and the JSON asked for, written
        assert json.loads(out.read_text())["processes"][0]["pid"] == child


def test_run_twice_to_the_same_json_replaces_the_recording(tmp_path, capsys):
    out = tmp_path / "run.json"
    pids = []
    for _ in range(2):
        proc = memgap("run", "--interval", "0.5", "--json", str(out), "--", sys.executable, "-c",
                      "import memgap, os; print(os.getpid()); memgap.phase('only')")
        assert proc.returncode == 0, proc.stderr
        pids.append(int(proc.stdout.splitlines()[0]))
    run = json.loads(out.read_text())
    assert [p["pid"] for p in run["processes"]] == [pids[1]], run["processes"]
    assert [s["phase"] for s in run["processes"][0]["snapshots"]].count("only") == 1
    assert {t["pid"] for t in run["timeline"]} == {pids[1]}
    # a run's recording has no variants table: --markdown is refused, nothing written
    code, _, err = cli(capsys, "report", str(out) + ".d", "--markdown", str(tmp_path / "x.md"))
    assert code == 2 and "--html and --markdown are for a lab's results" in err
    assert not (tmp_path / "x.md").exists()
    # a folder in the way that is not a recording is not removed
    other = tmp_path / "mine.json.d"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    err = one_line_error(memgap("run", "--json", str(tmp_path / "mine.json"), "--", "true"), 2)
    assert "is not a memgap recording" in err and (other / "notes.txt").read_text() == "mine"


# --- top on a target that exits ------------------------------------------------------------------

def test_top_refreshes_while_a_look_is_under_way(tmp_path_factory, tmp_path):
    """A look as slow as the test wants: programs/gated_reads.py runs memgap with its first look at
    the program (programs/alloc_hold.c, which knows nothing of memgap) held until the test lets it
    go, which it does once top has refreshed three times meanwhile, each with RSS read afresh and
    the look said under way (with the look in top's loop, no refresh comes, and the test fails);
    then the breakdown shows, with its age."""
    from helpers import build_c

    target = subprocess.Popen([build_c(tmp_path_factory, "alloc_hold", "-ldl")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline() == "ready\n"
    gate = tmp_path / "gate"
    gate.mkdir()
    top = subprocess.Popen([sys.executable, os.path.join(HERE, "programs", "gated_reads.py"), str(gate), "alloc_hold",
                            "top", str(target.pid), "--interval", "0.05"],
                           env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Timer(120, top.kill)  # a top that stalls fails the test, never hangs it
    stop.start()

    def until(what):
        seen = []
        while not seen or what not in seen[-1]:
            seen.append(top.stdout.readline())
            assert seen[-1], (seen, top.stderr.read())
        return seen

    try:
        for _ in range(3):
            lines = until("the first look under way")
            assert lines[-2].startswith("--- ") and re.match(r"RSS \d+\.\d MiB now \(read at each refresh\)", lines[-1])
        assert (gate / "reading").exists() and not (gate / "go").exists()  # the look is held still
        (gate / "go").touch()
        lines = until("breakdown below: read")
        assert re.search(r"read \d+\.\d s ago, in \d+\.\d s", lines[-1]), lines[-1]
        assert "glibc arenas" in "".join(until("glibc arenas"))
        target.stdin.close()
        target.wait()  # reaped at once: gone, not a zombie
        rest, stderr = top.communicate(timeout=60)
    finally:
        stop.cancel()
        for proc in (target, top):
            proc.kill()
            proc.wait()
    assert top.returncode == 0 and stderr == "", (top.returncode, stderr)
    assert rest.rstrip().endswith(f"PID {target.pid} exited"), rest[-500:]


def test_top_on_a_target_that_exits_between_refreshes():
    """The target exits once top has refreshed twice (its parent, this test, reaps it at once)."""
    target = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    top = subprocess.Popen([sys.executable, "-m", "memgap", "top", str(target.pid), "--interval", "0.05"],
                           env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while sum(line.startswith("--- ") for line in lines) < 2:  # without a terminal: one per refresh
            lines.append(top.stdout.readline())
            assert lines[-1], (lines, top.stderr.read())
        target.stdin.close()
        target.wait()
        rest, stderr = top.communicate(timeout=30)
    finally:
        for proc in (target, top):
            proc.kill()
            proc.wait()
    assert top.returncode == 0 and stderr == "", (top.returncode, stderr)
    assert rest.rstrip().endswith(f"PID {target.pid} exited"), rest[-500:]


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_process_that_exits_mid_read_is_gone_not_malformed(reaped):
    """The race under top's refresh, made certain: memgap's pagemap file is open when the
    process exits (the kernel then reads no pagemap: 0 bytes)."""
    from memgap.errors import NoSuchProcess
    from memgap.sources.procfs import ProcReader

    proc = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE)
    proc.stdout.readline()
    reader = ProcReader(proc.pid)
    stack = next(m for m in reader.maps() if m.path == "[stack]")
    reader.pagemap(stack.start, stack.end)
    proc.kill()
    if reaped:
        proc.wait()
    else:
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
    try:
        with pytest.raises(NoSuchProcess):
            reader.pagemap(stack.start, stack.end)
    finally:
        proc.wait()


def test_ctrl_c_to_memgap_alone_ends_the_commands_children_too(tmp_path):
    """`kill -INT` to memgap only: the command's own children, in its process group, are
    stopped with it, not left running."""
    proc = subprocess.Popen([sys.executable, "-m", "memgap", "run", "--interval", "0.05", "--json",
                             str(tmp_path / "run.json"), "--", "/bin/sh", "-c", "sleep 60 & echo $!; wait"],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        grandchild = int(proc.stdout.readline())
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    deadline = time.time() + 5  # the kernel reaps an orphan through init: give it a moment
    while os.path.exists(f"/proc/{grandchild}") and time.time() < deadline:
        if Path(f"/proc/{grandchild}/stat").read_text().split(")")[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    alive = os.path.exists(f"/proc/{grandchild}") and \
        Path(f"/proc/{grandchild}/stat").read_text().split(")")[1].split()[0] != "Z"
    assert not alive, f"sleep {grandchild} outlived memgap"


def test_a_snapshot_of_a_process_whose_memory_is_gone_says_it_exited():
    """A process read as it exits (its memory torn down, its status without VmRSS, as a zombie's)
    is gone, not a snapshot of 0 bytes: a lab once summed such a driver's idle PSS as 0."""
    from memgap.errors import NoSuchProcess
    from memgap.explain.snapshot import snapshot_pid

    proc = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE)
    proc.stdout.readline()
    proc.kill()
    try:
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        assert "VmRSS" not in Path(f"/proc/{proc.pid}/status").read_text()
        with pytest.raises(NoSuchProcess, match="exited while memgap read it"):
            snapshot_pid(proc.pid)
    finally:
        proc.wait()
