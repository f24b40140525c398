"""What a careless or hostile user does to memgap run as root (issue 23, items 1 and 7): each bad
input gets one line and its exit code, no traceback, and nothing outside memgap's own folder is
touched. Real commands, as a user types them."""
import os
import subprocess
import sys

import pytest

from conftest import HERE, child_env
from helpers import memgap

NOBODY = 65534


def one_line(proc, code):
    """The command failed with ``code`` and said why in one line on stderr, no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("memgap: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# --- recording folders (item 1) ----------------------------------------------------------------

@pytest.fixture
def shared_tmp(tmp_path):
    """A sticky folder every user may write in, as /tmp is."""
    where = tmp_path / "shared"
    where.mkdir()
    os.chmod(where, 0o1777)
    return where


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folder is made another user's")
def test_run_refuses_a_recording_folder_another_user_made(shared_tmp, tmp_path):
    victim = tmp_path / "root-owned.txt"
    victim.write_text("root's own\n")
    planted = shared_tmp / "out.json.d"
    planted.mkdir()
    for pid in range(os.getpid(), os.getpid() + 200):  # links named for the next PIDs, to root's file
        os.symlink(victim, planted / f"agent-{pid}.txt")
        os.symlink(victim, planted / f"process-{pid}.jsonl")
    os.chown(planted, NOBODY, NOBODY)
    os.chmod(planted, 0o777)
    line = one_line(memgap("run", "--json", str(shared_tmp / "out.json"), "--", "true"), 2)
    assert "not a folder only you may write in" in line
    assert victim.read_text() == "root's own\n"
    assert not (shared_tmp / "out.json").exists()


def test_run_refuses_a_link_where_its_folder_goes(shared_tmp, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, shared_tmp / "out.json.d")
    one_line(memgap("run", "--json", str(shared_tmp / "out.json"), "--", "true"), 2)
    assert os.listdir(elsewhere) == []


def test_run_makes_its_folder_for_itself(tmp_path):
    proc = memgap("run", "--json", str(tmp_path / "out.json"), "--", "true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = os.stat(tmp_path / "out.json.d")
    assert made.st_uid == os.getuid() and made.st_mode & 0o777 == 0o700
    # the same --json again replaces the earlier recording, as it replaces the JSON
    assert memgap("run", "--json", str(tmp_path / "out.json"), "--", "true").returncode == 0


def test_run_cannot_make_its_folder(tmp_path):
    line = one_line(memgap("run", "--json", "/proc/memgap-test.json", "--", "true"), 1)
    assert "cannot make the recording folder /proc/memgap-test.json.d" in line


# --- bad options (item 7) ------------------------------------------------------------------------

def test_a_bad_phase_regex_is_a_usage_error():
    line = one_line(memgap("run", "--phase-regex", "(", "--", "true"), 2)
    assert "not a regular expression" in line


def test_json_into_a_folder_that_is_not_there(tmp_path):
    target = tmp_path / "x" / "y" / "z.json"
    one_line(memgap("inspect", str(os.getpid()), "--json", str(target)), 2)
    assert not (tmp_path / "x").exists()


def test_a_gdb_that_is_not_there():
    line = one_line(memgap("inspect", str(os.getpid()), "--deep", "--gdb", "/missing/gdb"), 9)
    assert "/missing/gdb is not an executable gdb" in line and "apt-get" not in line


def test_pids_that_are_not_processes():
    line = one_line(memgap("inspect", "2"), 5)  # kthreadd
    assert "kernel thread" in line
    with open("/proc/sys/kernel/pid_max") as fh:
        never = next(p for p in range(int(fh.read()) - 1, 1, -1) if not os.path.exists(f"/proc/{p}"))
    assert one_line(memgap("inspect", str(never)), 3) == f"memgap: no process with PID {never}"


# --- documents memgap did not write (item 7) -----------------------------------------------------

@pytest.mark.parametrize("text, said", [
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ('{"schema": "memgap.run/1", "pid": 1' + "0" * 400 + "}", "beyond 64 bits"),
    ('{"schema": "memgap.run/1", "rss": NaN}', "NaN is not a figure"),
    ('{"schema": "memgap.run/1", "rss": -Infinity}', "-Infinity is not a figure"),
    ('{"schema": "memgap.run/1", "rss": 1e999}', "out of range"),
    ('{"schema": "memgap.lab/0"}', "an older memgap wrote it"),
    ('{"schema": "memgap.lab/9"}', "a newer memgap wrote it"),
])
def test_report_refuses_what_memgap_did_not_write(tmp_path, text, said):
    path = tmp_path / "doc.json"
    path.write_text(text)
    assert said in one_line(memgap("report", str(path)), 6)


SAVED = os.path.join(HERE, "fixtures", "documents", "8a6ec88")


def _hostile(kind, tmp_path, value):
    """A document memgap wrote (saved by an earlier version) with ``value`` put in one byte field:
    a run's process's idle RSS, a lab run's peak, a snapshot's RSS in a run's recording folder.
    ``value`` is JSON text, put in as it is (1e400 and NaN are no Python JSON)."""
    import json

    name, path = {"run": ("run-trimmer.json", ("processes", 0, "idle", "rss")),
                  "lab": ("lab.json", ("runs", 0, "peak")), "snapshot": ("run-trimmer.json", ("rss",))}[kind]
    with open(os.path.join(SAVED, name)) as fh:
        document = json.load(fh)
    if kind == "snapshot":
        process = document["processes"][0]
        document = process["snapshots"][0]
    holder = document
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = "HOSTILE"
    text = json.dumps(document).replace('"HOSTILE"', value)
    if kind != "snapshot":
        (tmp_path / "doc.json").write_text(text)
        return tmp_path / "doc.json", path[-1]
    folder = _recording(tmp_path / "rec", HEADER)
    with open(folder / "samples.jsonl", "a") as fh:  # a line after it: a bad last line reads as one cut short
        fh.write(f'{{"type": "snapshot", "pid": {process["pid"]}, "snapshot": {text}}}\n')
        fh.write(json.dumps({"type": "snapshot", "pid": process["pid"], "snapshot": process["snapshots"][-1]}) + "\n")
    return folder, path[-1]


@pytest.mark.parametrize("kind", ["run", "lab", "snapshot"])
@pytest.mark.parametrize("value, said", [("-5", "-5 is negative"), ("1e400", "out of range"),
                                         ("-1e400", "out of range"), ("NaN", "NaN is not a figure"),
                                         ("Infinity", "Infinity is not a figure"),
                                         ("true", "bool where int belongs")])
def test_report_refuses_a_figure_no_memgap_writes(tmp_path, kind, value, said):
    """A negative, infinite or NaN byte count, or a bool for one: one line, naming the field where
    the figure is a checked one, and the malformed-input exit code."""
    where, field = _hostile(kind, tmp_path, value)
    line = one_line(memgap("report", str(where)), 6)
    assert said in line, line
    if value in ("-5", "true"):  # the parser refuses the others before any field is read
        assert f"'{field}'" in line, line


@pytest.mark.parametrize("kind", ["run", "lab", "snapshot"])
def test_report_still_reads_the_saved_document_untouched(tmp_path, kind):
    """The same document with its own figure put back: read, no error (the test above fails for
    what it changed, not for the rest)."""
    import json

    name = {"run": "run-trimmer.json", "lab": "lab.json", "snapshot": "run-trimmer.json"}[kind]
    with open(os.path.join(SAVED, name)) as fh:
        document = json.load(fh)
    own = {"run": lambda d: d["processes"][0]["idle"]["rss"], "lab": lambda d: d["runs"][0]["peak"],
           "snapshot": lambda d: d["processes"][0]["snapshots"][0]["rss"]}[kind](document)
    where, _ = _hostile(kind, tmp_path, json.dumps(own))
    proc = memgap("report", str(where))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_deep_in_a_program_with_its_own_memgap_module(tmp_path):
    """A Python program that ships a module named memgap: --deep does not run it, and says so."""
    (tmp_path / "memgap").mkdir()
    (tmp_path / "memgap" / "__init__.py").write_text("def snapshot(**options):\n    return 42\n")
    prog = tmp_path / "prog.py"
    prog.write_text("import memgap, sys, time\nprint('ready', flush=True)\nsys.stdin.read()\n")
    env = child_env()
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen([sys.executable, str(prog)], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        done = memgap("inspect", str(proc.pid), "--deep", "--json", "-", timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        import json

        notes = json.loads(done.stdout)["deep"]["notes"]
        assert any("a module of its own named memgap" in n for n in notes), notes
    finally:
        proc.kill()
        proc.wait()


# --- the lab's folder, and links planted in memgap's own (item 1) ---------------------------------

@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folder is made another user's")
def test_lab_refuses_a_folder_another_user_made(shared_tmp, tmp_path):
    victim = tmp_path / "root-owned.txt"
    victim.write_text("root's own\n")
    planted = shared_tmp / "lab"
    planted.mkdir()
    os.symlink(victim, planted / "lab.jsonl")
    for pid in range(os.getpid(), os.getpid() + 200):
        os.symlink(victim, planted / f"agent-{pid}.txt")
    os.chown(planted, NOBODY, NOBODY)
    os.chmod(planted, 0o777)
    line = one_line(memgap("lab", "--reps", "1", "--variant", "glibc", "--dir", str(planted), "--", "true"), 2)
    assert "not a folder only you may write in" in line and "--dir" in line
    assert victim.read_text() == "root's own\n"
    assert not [p for p in planted.iterdir() if not p.is_symlink()]  # nothing written there


def test_lab_refuses_a_link_where_its_folder_goes(shared_tmp, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, shared_tmp / "lab")
    one_line(memgap("lab", "--reps", "1", "--variant", "glibc", "--dir", str(shared_tmp / "lab"), "--", "true"), 2)
    assert os.listdir(elsewhere) == []


def test_lab_makes_its_folder_for_itself(tmp_path):
    proc = memgap("lab", "--reps", "1", "--variant", "glibc", "--phase-regex", r"phase: (\S+)", "--dir",
                  str(tmp_path / "lab"), "--", "/bin/sh", "-c", "echo 'phase: idle'; sleep 0.3", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for folder in (tmp_path / "lab", tmp_path / "lab" / "run-001-glibc"):
        made = os.stat(folder)
        assert made.st_uid == os.getuid() and made.st_mode & 0o777 == 0o700, (folder, oct(made.st_mode))


# The workload itself plants links in the recording's folder, named for the PIDs its children will
# have, to a file of root's: the agent (in sleep) and the recorder (of the Python child) must make
# files of their own, never write through a link (the Python child marks a phase: its snapshots are its
# own, in-process, written by its bootstrap; an unmodified one is read from outside at its exit).
PLANTER = r"""
"$2" -c '
import os, sys
for pid in range(os.getpid() + 1, os.getpid() + 400):
    for name in (f"agent-{pid}.txt", f"process-{pid}.jsonl", f"process-{pid}.trims.jsonl"):
        os.symlink(sys.argv[1], os.path.join(os.environ["MEMGAP_RECORD_DIR"], name))
os.symlink(sys.argv[1], os.path.join(os.environ["MEMGAP_RECORD_DIR"], "load-output.txt"))
' "$1"
sleep 0.2 & echo "sleep $!"; wait
"$2" -c 'import os, memgap; memgap.phase("work"); print("python", os.getpid())'
"""


def test_links_planted_in_the_recording_are_never_followed(tmp_path):
    victim = tmp_path / "root-owned.txt"
    victim.write_text("root's own\n")
    script = tmp_path / "planter.sh"
    script.write_text(PLANTER)
    out = tmp_path / "run.json"
    proc = memgap("run", "--json", str(out), "--", "/bin/sh", str(script), str(victim), sys.executable, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert victim.read_text() == "root's own\n"
    pids = dict(line.split() for line in proc.stdout.splitlines() if line.startswith(("sleep ", "python ")))
    folder = tmp_path / "run.json.d"
    for name in (f"agent-{pids['sleep']}.txt", f"process-{pids['python']}.jsonl"):
        assert (folder / name).is_symlink(), name  # the test planted what it meant to: a name memgap wanted
    made = [p for p in folder.iterdir() if not p.is_symlink() and p.is_file()]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in made), [(p.name, oct(p.stat().st_mode)) for p in made]
    import json

    run = json.loads(out.read_text())
    python = next(p for p in run["processes"] if p["pid"] == int(pids["python"]))
    assert [s["phase"] for s in python["snapshots"]][-1] in ("exit", "before-exit")  # its own file, made anew
    assert not any("root's own" in json.dumps(e) for e in run["errors"])  # nothing read through a link


# --- recordings too large to be memgap's (item 8) ------------------------------------------------

def _recording(folder, *events):
    import json

    folder.mkdir()
    (folder / "samples.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


HEADER = {"type": "header", "schema": "memgap.run/1", "cmd": ["true"], "start": 1.0, "interval": 0.1}


@pytest.mark.parametrize("where", ["cmd", "phase"])
def test_report_refuses_a_string_over_1_mib(tmp_path, where):
    big = "x" * (2 << 20)
    events = [{**HEADER, "cmd": ["python", big]}] if where == "cmd" else \
        [HEADER, {"type": "snapshot", "pid": 5, "snapshot": {"phase": big, "rss": 1, "time": 1.0}}]
    line = one_line(memgap("report", str(_recording(tmp_path / "rec", *events))), 6)
    assert "a string of 2.0 MiB" in line and "none over 1 MiB" in line


def test_report_refuses_a_line_over_16_mib(tmp_path):
    folder = _recording(tmp_path / "rec", HEADER)
    with open(folder / "samples.jsonl", "a") as fh:
        fh.write('{"type": "sample", "pad": [' + ",".join(["1"] * (9 << 20)) + "]}\n")
    line = one_line(memgap("report", str(folder)), 6)
    assert "line 2: a line over 16 MiB" in line


def test_report_reads_no_recording_file_through_a_link(tmp_path):
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"type": "metric", "pid": 1, "name": "secret", "value": 42}\n')
    folder = _recording(tmp_path / "rec", HEADER, {"type": "end", "t": 1.0, "exit_code": 0})
    os.symlink(secret, folder / "process-77.jsonl")
    proc = memgap("report", str(folder), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    import json

    run = json.loads(proc.stdout)
    assert run["metrics"] == {} and any("a link, not followed" in e["error"] for e in run["errors"])
    os.remove(folder / "samples.jsonl")
    os.symlink(secret, folder / "samples.jsonl")
    assert "a link, not followed" in one_line(memgap("report", str(folder)), 6)
