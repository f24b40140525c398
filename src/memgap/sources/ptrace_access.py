"""May this process ptrace another? Yama's setting and our capability, read and explained.

The explanation is a pure function of what was read (tested on each Yama
setting); gdb_attach asks it before attaching and again when the kernel refused.
"""
from __future__ import annotations

import os

YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
CAP_SYS_PTRACE = 19


def yama_text(scope: int | None) -> str:
    return (f"kernel.yama.ptrace_scope is {scope}" if scope is not None
            else "kernel.yama.ptrace_scope is not present (no Yama module)")


def ptrace_refusal(scope: int | None, privileged: bool, tracer: int, tracer_name: str = "",
                   refused: bool = False) -> str | None:
    """Why attaching is or was refused.

    Before attaching (``refused`` False) it answers only when the refusal is
    certain; after the kernel refused (gdb said "ptrace: Operation not
    permitted") it always gives the likeliest reason, naming the Yama setting.
    """
    yama = yama_text(scope)
    if tracer:
        who = f"PID {tracer}" + (f" ({tracer_name})" if tracer_name else "")
        return (f"it is already traced by {who}; only one tracer (debugger, strace) may attach at a time "
                f"({yama})")
    if scope == 3:
        return f"{yama}: no process may attach to another until a reboot"
    if scope == 2 and not privileged:
        return f"{yama}: only root (CAP_SYS_PTRACE) may attach; run memgap as root"
    if not refused:
        return None
    if scope == 1 and not privileged:
        return (f"{yama}: only an ancestor of the process may attach; run memgap as root, "
                "or lower it with `sysctl kernel.yama.ptrace_scope=0`")
    if not privileged:
        return f"run memgap as the process's owner or as root ({yama})"
    return (f"refused even with CAP_SYS_PTRACE: a container without that capability, a security module "
            f"(SELinux, AppArmor) or a seccomp filter forbids ptrace here ({yama})")


def read_yama_scope(path: str = YAMA_SCOPE) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def has_cap_sys_ptrace(status_text: str | None = None) -> bool:
    """Whether this process may trace any other (CapEff bit 19)."""
    if status_text is None:
        try:
            with open("/proc/self/status") as fh:
                status_text = fh.read()
        except OSError:
            return os.geteuid() == 0
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    return os.geteuid() == 0
