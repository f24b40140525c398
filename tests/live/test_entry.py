"""The ``memgap`` command's entry (``memgap.cli.entry``: the console script and ``python -m memgap``) ends
the process without the interpreter's teardown: what a normal exit does first must still happen, on a
real interpreter running it as a user's shell does."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# as a user's shell runs it: its standard streams buffered (this machine's environment unbuffers them)
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _python(code: str, tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=BUFFERED)


def test_the_exit_code_and_every_line_written_reach_the_caller(tmp_path):
    # a report of a folder that is not a recording: exit code 2, the error in full; --help: its whole text piped
    bad = subprocess.run([sys.executable, "-m", "memgap", "report", str(tmp_path / "none")], capture_output=True,
                         text=True, timeout=60, env=BUFFERED)
    assert bad.returncode != 0 and bad.stderr.startswith("memgap: "), bad
    whole = subprocess.run([sys.executable, "-m", "memgap", "run", "--help"], capture_output=True, text=True,
                           timeout=60, env=BUFFERED)
    assert whole.returncode == 0 and "--no-agent" in whole.stdout and whole.stdout.endswith("\n")
    many = _python("""
        import sys
        import memgap.cli
        sys.argv = ["memgap", "report", sys.argv[1]]
        memgap.cli.main = lambda: (sys.stdout.write("x" * 2000), 7)[1]  # buffered, unflushed: then its code
        memgap.cli.entry()
    """, tmp_path, "unused")
    assert many.returncode == 7 and many.stdout == "x" * 2000


def test_atexit_handlers_run_and_a_running_thread_is_waited_for(tmp_path):
    done = _python("""
        import atexit, sys, threading, time
        import memgap.cli
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))
        def late():
            time.sleep(0.3)
            open("thread.txt", "w").write("ran")
        threading.Thread(target=late).start()  # not a daemon: a normal exit waits for it
        memgap.cli.main = lambda: 3
        memgap.cli.entry()
    """, tmp_path)
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "ran"
