"""jcmd, the JVM's own supported way in (its attach API), run only when the caller asks for the deep
route: whether it is safe to run, which jcmd, and its output (memgap.runtimes.jvm_parse parses it).

The first attach to a JVM creates ``.attach_pid<pid>`` and sends it SIGQUIT, which starts its
attach listener. A JVM started with -Xrs (ReduceSignalUsage) does not catch SIGQUIT: it starts its
listener at startup instead, so jcmd is run only where that listener's socket is already there.
A JVM that refuses attaching (-XX:+DisableAttachMechanism, or jvmCapabilities saying so) prints a
thread dump on SIGQUIT: jcmd is not run on it.
"""
from __future__ import annotations

import os
import shutil
import subprocess

from memgap.errors import MemgapError
from memgap.runtimes.base import ProcessView

JCMD_TIMEOUT = 20.0


def attach_refusal(process: ProcessView, flags: dict[str, str], attach_supported: bool | None) -> str | None:
    """Why jcmd must not be run on this JVM; None where it may."""
    if attach_supported is False:
        return "its perf data says it does not support attaching (sun.rt.jvmCapabilities)"
    if flags.get("DisableAttachMechanism") == "true":
        return "it was started with -XX:+DisableAttachMechanism (SIGQUIT would print a thread dump)"
    if flags.get("ReduceSignalUsage") == "true" and not _listener_socket(process):
        return "it was started with -Xrs and has no attach socket: the SIGQUIT that starts one would end it"
    return None


def _listener_socket(process: ProcessView) -> bool:
    """Whether the JVM's attach socket (/tmp/.java_pid<its pid in its namespace>) exists."""
    try:
        nspid = str(process.reader.status().get("NSpid", process.pid)).split()[-1]
        return os.path.exists(f"/proc/{process.pid}/root/tmp/.java_pid{nspid}")
    except (MemgapError, IndexError):
        return False


def jcmd_path(process: ProcessView, home: str) -> str | None:
    """The target's own JDK's jcmd where the target shares memgap's mount namespace (its version
    matches), else the one on PATH. A container's own files are never run."""
    try:
        same_ns = os.readlink("/proc/self/ns/mnt") == os.readlink(f"/proc/{process.pid}/ns/mnt")
    except OSError:
        same_ns = False
    own = os.path.join(home, "bin", "jcmd")
    if same_ns and os.access(own, os.X_OK):
        return own
    return shutil.which("jcmd")


def run_jcmd(jcmd: str, pid: int, command: str, notes: list[str]) -> str | None:
    """``jcmd PID COMMAND``'s output; None, with a note saying why, where it failed."""
    try:
        done = subprocess.run([jcmd, str(pid), *command.split()], capture_output=True, text=True,
                              timeout=JCMD_TIMEOUT, env={**os.environ, "LC_ALL": "C"}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"jcmd {command}: {exc}")
        return None
    if done.returncode != 0:
        lines = (done.stdout + "\n" + done.stderr).splitlines()
        first = next((line for line in lines if line.strip() and line.strip() != f"{pid}:"), "no output")
        notes.append(f"jcmd {command} failed (exit {done.returncode}): {first.strip()[:200]}")
        return None
    return done.stdout
