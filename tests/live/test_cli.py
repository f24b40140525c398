"""The CLI on real processes: inspect from outside, trees, bad input, killed recordings (its main()
called in this process, where nothing is started: tests/unit/test_cli_in_process.py)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import child_env
from helpers import MiB, check_adds_up, memgap
from memgap.record.assemble import load_run

HOLDER = (
    "import sys, time\n"
    "blocks = [bytearray(64 * 1024) for _ in range(400)]\n"  # ~25 MiB in glibc's heap
    "del blocks[::2]\n"
    "print('ready', flush=True)\n"
    "for i in range(600):\n"
    "    sys.stdout.write(f'tick {i}\\n'); sys.stdout.flush(); time.sleep(0.05)\n"
)


@pytest.fixture
def target():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def _state(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_inspect_outside_adds_up_and_leaves_target_running(target):
    for _ in range(5):
        proc = memgap("inspect", str(target.pid), "--json", "-")
        assert proc.returncode == 0, proc.stderr
        assert _state(target.pid) in "RS"
    snap = json.loads(proc.stdout)
    assert snap["schema"].startswith("memgap.snapshot/")
    assert snap["route"] == "outside" and snap["pid"] == target.pid
    for key in ("rss", "layers", "unexplained", "allocator", "findings"):
        assert key in snap
    layers = {k: v["resident"] for k, v in snap["layers"].items()}
    # small objects, counted from pymalloc's pool headers; the 64 KiB buffers are the C allocator's
    assert "pool header" in snap["layers"]["python_objects"]["derivation"]
    assert 0 < layers["python_objects"] < 8 * MiB and layers["allocator_in_use"] >= 12 * MiB
    check_adds_up(snap)
    # the freed half of the blocks sits in glibc's free chunks, found from outside
    assert layers["allocator_free"] >= 8 * MiB
    # the target kept running and printing in order
    lines = [target.stdout.readline().strip() for _ in range(3)]
    numbers = [int(line.split()[1]) for line in lines]
    assert numbers == sorted(numbers) and numbers[-1] - numbers[0] == 2


def test_inspect_tree(tmp_path):
    script = ("import subprocess, sys, time\n"
              "kids = [subprocess.Popen([sys.executable, '-c', 'import time; x = bytearray(8 << 20); "
              "x[::4096] = b\"1\" * len(x[::4096]); print(1, flush=True); time.sleep(30)'], "
              "stdout=subprocess.PIPE) for _ in range(2)]\n"
              "[k.stdout.readline() for k in kids]\n"
              "print('ready', flush=True); time.sleep(30)\n")
    # its own session: the whole tree is stopped at the end, and nothing else
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        proc = memgap("inspect", str(parent.pid), "--tree", "--json", "-")
        assert proc.returncode == 0, proc.stderr
        tree = json.loads(proc.stdout)
        assert len(tree["processes"]) == 3
        kids = [p for p in tree["processes"] if p["pid"] != parent.pid]
        assert all(p["rss"] >= 6 * MiB for p in kids), kids  # each wrote 6 MiB of its own
        # three interpreters share their libraries' pages: by PSS the tree costs less than its RSS sum
        assert 12 * MiB <= tree["total_pss"] < tree["total_rss"] - 4 * MiB, (tree["total_pss"], tree["total_rss"])
        text = memgap("inspect", str(parent.pid), "--tree")
        assert text.returncode == 0, text.stderr
        assert "3 processes" in text.stdout
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def _one_line_error(proc, code):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("memgap: "), proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_pid():
    _one_line_error(memgap("inspect", "999999999"), 3)


def test_pid_of_exited_process():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    _one_line_error(memgap("inspect", str(proc.pid)), 3)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to another user")
def test_permission_denied(target):
    """memgap as another user (nobody) may not read the target's memory: exit 4, one line."""
    import memgap.cli  # imported before the fork: the child cannot read root's site-packages

    memgap.cli.command_module("inspect")  # nor the command's module, imported when it runs

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become nobody, run the CLI, report its exit code
        try:
            os.close(read_fd)
            sys.stderr = os.fdopen(write_fd, "w", buffering=1)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            code = memgap.cli.main(["inspect", str(target.pid)])
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the forked child reaches os._exit whatever happens
            code = 99
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        stderr = fh.read()
    _, status = os.waitpid(pid, 0)
    proc = subprocess.CompletedProcess([], os.waitstatus_to_exitcode(status), "", stderr)
    _one_line_error(proc, 4)
    assert "permission denied" in stderr
    assert _state(target.pid) in "RS"


def test_vanished_mid_read():
    from memgap.errors import NoSuchProcess
    from memgap.sources.procfs import ProcReader

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    reader = ProcReader(proc.pid)
    reader.maps()
    proc.kill()
    proc.wait()
    with pytest.raises(NoSuchProcess):
        reader.status()


def test_malformed_proc_file_exit_code(tmp_path):
    fake = tmp_path / "proc" / "4242"
    fake.mkdir(parents=True)
    (fake / "stat").write_text("4242 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 1 1\n")
    (fake / "maps").write_text("00400000-00401000 r-xp 00000000 fe:00 12 /bin/x\n0040")  # cut mid-line
    _one_line_error(memgap("inspect", "4242", "--proc-root", str(tmp_path / "proc")), 6)


HOLD_C = ('#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n'
          'int main(void){void *p[64]; for (int i = 0; i < 64; i++) p[i] = malloc(200000);'
          'puts("ready"); fflush(stdout); sleep(30); return p[0] == 0;}\n')


def _inspect_native(tmp_path, compile_cmd):
    """Build HOLD_C with ``compile_cmd + [-o exe, src]``, run it, inspect it from outside."""
    src, exe = tmp_path / "hold.c", tmp_path / "hold"
    src.write_text(HOLD_C)
    if subprocess.run([*compile_cmd, "-o", str(exe), str(src)], capture_output=True).returncode:
        pytest.skip(f"{' '.join(compile_cmd)} cannot build here")
    proc = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        out = memgap("inspect", str(proc.pid), "--json", "-")
        assert out.returncode == 0, out.stderr
        assert _state(proc.pid) in "RS"
        return json.loads(out.stdout)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not shutil.which("gcc"), reason="no C compiler")
def test_static_non_glibc_binary(tmp_path):
    """glibc linked into the program (no libc.so in its maps): named, found in the program, and the
    layers the outside walk cannot read (it finds arenas through libc.so's data) are named, not guessed."""
    snap = _inspect_native(tmp_path, ["gcc", "-static", "-O1"])
    assert snap["allocator"]["name"] == "glibc" and snap["allocator"]["library"] == str(tmp_path / "hold")
    assert "static program" in snap["allocator"]["how"]
    assert snap["layers"]["allocator_free"]["resident"] is None
    assert "linked into the program statically" in snap["layers"]["allocator_free"]["note"]
    check_adds_up(snap)  # what no layer claims is under other_anon, against RssAnon


@pytest.mark.skipif(not shutil.which("musl-gcc"), reason="musl-tools is not installed")
def test_musl_process(tmp_path):
    """musl's malloc is named as such; memgap reads its kernel view and measures no glibc layers."""
    snap = _inspect_native(tmp_path, ["musl-gcc"])
    assert snap["allocator"]["name"] == "musl"
    assert "musl" in snap["layers"]["allocator_free"]["note"]
    check_adds_up(snap)  # what no layer claims is under other_anon, against RssAnon


def test_run_killed_midway_keeps_recording(tmp_path):
    script = tmp_path / "phases.py"
    script.write_text("import memgap, time\nfor i in range(3):\n    memgap.phase(f'step-{i}')\n"
                      "time.sleep(30)\n")
    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "memgap", "run", "--json", str(out), "--",
                             sys.executable, str(script)], env=child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    record_dir = str(out) + ".d"
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(record_dir) and any(f.startswith("process-") for f in os.listdir(record_dir)):
            run = load_run(record_dir)
            if any(len(p.snapshots) == 3 for p in run.processes):
                break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    run = load_run(record_dir)
    assert not run.complete
    assert run.timeline, "samples written before the kill are kept"
    phases = [s["phase"] for p in run.processes for s in p.snapshots]
    assert phases == ["step-0", "step-1", "step-2"]
    # and the CLI shows what it kept
    shown = memgap("report", record_dir, "--json", str(tmp_path / "kept.json"))
    assert shown.returncode == 0, shown.stderr
    assert "step-2" in shown.stdout and "cut short" in shown.stdout
    assert json.loads((tmp_path / "kept.json").read_text())["schema"] == "memgap.run/1"
    _one_line_error(memgap("report", str(tmp_path)), 2)  # not a recording


def test_run_returns_child_exit_code_and_needs_a_command(tmp_path):
    assert memgap("run", "--", sys.executable, "-c", "raise SystemExit(7)").returncode == 7
    _one_line_error(memgap("run"), 2)


def test_top_refreshes_and_ends(target):
    proc = memgap("top", str(target.pid), "--iterations", "3", "--interval", "0.1")
    assert proc.returncode == 0, proc.stderr
    # three refreshes, the last with a breakdown (the looks are made beside them)
    assert proc.stdout.count("---") == 3 and re.search(r"last \d+ looks?\b", proc.stdout), proc.stdout
    assert proc.stdout.count("(read at each refresh)") == 3
    assert "glibc arenas" in proc.stdout and "trend" in proc.stdout
    assert _state(target.pid) in "RS"
    _one_line_error(memgap("top", "999999999", "--iterations", "1"), 3)


def test_a_pid_below_1_is_not_called_a_process_that_exited():
    proc = memgap("inspect", "-5")
    _one_line_error(proc, 2)
    assert "is not a valid PID" in proc.stderr and "exited" not in proc.stderr


def test_report_on_a_folder_that_is_neither_says_what_it_wanted(tmp_path):
    proc = memgap("report", str(tmp_path))
    _one_line_error(proc, 2)
    assert "neither a memgap run recording (no samples.jsonl) nor a lab's folder (no lab.jsonl)" in proc.stderr


def test_a_command_imports_only_its_own_module():
    code = ("import sys\nfrom memgap.cli import build_parser\nbuild_parser('inspect')\n"
            "print(sorted(m for m in sys.modules if m.startswith('memgap.cli.') and not m.startswith('memgap.cli._')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    assert out.stdout.strip() == "['memgap.cli.inspect']", out.stdout + out.stderr


QUICK_START = (  # main() in a fresh interpreter: its exit code and what it loaded beyond the interpreter's start
    "import contextlib, io, sys\nbefore = set(sys.modules)\nfrom memgap.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n        code = main(sys.argv[1:])\n    except SystemExit as exc:\n        code = exc.code\n"
    "print(code, ' '.join(sorted(set(sys.modules) - before)))"
)


def _started(*argv):
    out = subprocess.run([sys.executable, "-c", QUICK_START, *argv], capture_output=True, text=True, env=child_env())
    code, _, loaded = out.stdout.strip().partition(" ")
    return int(code), set(loaded.split()), out.stderr


def test_memgap_help_and_a_look_load_what_they_use(target):
    """Issue 30's quick start: `memgap --help` loads no command, nor rich or typing; a look at a small
    Python process loads neither the run's nor the lab's code, nor a Go or JVM reader's parsers
    (tests/unit/test_start_imports.py holds what each module loads at its top)."""
    code, loaded, err = _started("--help")
    assert code == 0, err
    assert not {m for m in loaded if m.startswith("memgap.cli.") or m.split(".")[0] in ("rich", "typing")}, loaded
    code, loaded, err = _started("inspect", str(target.pid))
    assert code == 0, err
    assert {"memgap.explain.snapshot", "memgap.runtimes.go", "memgap.runtimes.jvm", "memgap.agent.client"} <= loaded
    heavy = {"memgap.documents.records", "memgap.documents.lab_summary", "memgap.explain.tree", "memgap.native.build",
             "memgap.allocators.catalog", "memgap.runtimes.go_state", "memgap.runtimes.go_dwarf",
             "memgap.runtimes.jvm_parse", "memgap.sources.hsperfdata", "memgap.inside.gdb", "memgap.report.html"}
    assert not loaded & heavy and not {m for m in loaded if m.startswith(("memgap.lab", "memgap.record"))}, (
        sorted(loaded & heavy))


RUN_STARTED = (  # `memgap run -- CMD` in a fresh interpreter: what it had loaded when it started CMD
    "import subprocess, sys\nstarted = []\nopen_ = subprocess.Popen.__init__\n"
    "def watched(self, args, *a, **k):\n"
    "    if not started and list(args) == sys.argv[-1:]:\n        started.append(set(sys.modules))\n"
    "    open_(self, args, *a, **k)\n"
    "subprocess.Popen.__init__ = watched\nfrom memgap.cli import main\ncode = main(sys.argv[1:])\n"
    "print('LOADED', code, ' '.join(sorted(started[0])))"
)


def test_memgap_run_starts_its_command_before_what_it_does_not_need_then(tmp_path):
    """Issue 30's run overhead: when `memgap run` starts its command, it has loaded neither what watches the
    command (the reader, the sampler) nor what it writes and shows after (json, the documents, rich), nor
    dataclasses (inspect with it: 0.02 s), tempfile or socket's module: each is loaded as the command starts."""
    out = subprocess.run([sys.executable, "-c", RUN_STARTED, "run", "--json", str(tmp_path / "r.json"), "--", "true"],
                         capture_output=True, text=True, env=child_env(), timeout=120)
    line = next(line for line in out.stdout.splitlines() if line.startswith("LOADED "))
    _, code, *loaded = line.split()
    assert code == "0", out.stderr
    assert {"memgap.record.recorder", "memgap.record.exit_hold", "subprocess"} <= set(loaded)
    late = {"dataclasses", "inspect", "json", "tempfile", "socket", "rich", "memgap.record.outside",
            "memgap.record.tree_watch", "memgap.documents.snapshot", "memgap.documents.records",
            "memgap.allocators.catalog"}
    assert not late & set(loaded), sorted(late & set(loaded))
