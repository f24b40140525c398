"""A memory cgroup per lab run: made under memgap's own, capped or not, removed after the run.

Why one per run: the charge of memgap's own cgroup is shared (memgap itself, page cache
earlier runs left, anything else living there), so no run's peak can be read from it; a
cgroup that held one run's tree alone can say that run's peak, and whether the kernel's
OOM killer acted inside it. With a limit (``memgap lab --memory-limit``) it shows which
variants a container of that size would have killed: swap is capped too (v1 memsw, v2
memory.swap.max = 0), so a run cannot hide its charge in swap.

The workload enters its cgroup in the child between fork and exec (``RunCgroup.enter``,
as subprocess's preexec_fn): its first instruction is already charged there, and Popen
returns only once the exec succeeded. Writing the PID from the parent after the fork
would race the program, which may allocate before the write, and neither version moves
what was charged before the move (v1 only with move_charge_at_immigrate, v2 never).
The parsers live in memgap.sources.cgroup; this module makes, writes and removes.
"""
from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass

from memgap.errors import MemgapError, Unsupported
from memgap.sources.cgroup import RunCharge, find_memory_cgroup, read_run_charge, read_usage

PREFIX = "memgap-run-"  # run cgroups are named PREFIX + memgap's PID + the run's order
GONE_WAIT = 5.0  # seconds for the processes of a run cgroup to die before it is removed


@dataclass(frozen=True)
class CgroupParent:
    """memgap's own memory cgroup, where its run cgroups are made."""

    version: int
    directory: str


def find_parent(proc_root: str = "/proc") -> CgroupParent:
    """memgap's memory cgroup, checked by making and removing one run cgroup with a limit;
    raises Unsupported with the reason where none can be made (one line)."""
    try:
        with open(f"{proc_root}/self/cgroup") as fh:
            cgroup_text = fh.read()
        with open(f"{proc_root}/self/mountinfo") as fh:
            mountinfo_text = fh.read()
    except OSError as exc:
        raise Unsupported(f"cannot read memgap's own cgroup ({exc.strerror or exc})") from None
    place = find_memory_cgroup(cgroup_text, mountinfo_text)
    if place is None:
        raise Unsupported("no memory cgroup controller is mounted here (neither v1's memory nor cgroup2)")
    parent = CgroupParent(place.version, place.directory)
    if parent.version == 2:
        _enable_memory_v2(parent.directory)
    _remove_stale(parent)
    make_run_cgroup(parent, "probe", 1 << 30).remove()
    return parent


def _enable_memory_v2(directory: str) -> None:
    """v2 gives a child the memory controller only where the parent's subtree_control names
    it, and refuses that to a cgroup with processes of its own (but the root)."""
    try:
        with open(os.path.join(directory, "cgroup.subtree_control")) as fh:
            if "memory" in fh.read().split():
                return
        with open(os.path.join(directory, "cgroup.subtree_control"), "w") as fh:
            fh.write("+memory")
    except OSError as exc:
        why = ("processes live in it, and cgroup v2 hands a controller to children only from a cgroup "
               "without processes: run memgap in a delegated cgroup of its own" if exc.errno == errno.EBUSY
               else exc.strerror or str(exc))
        raise Unsupported(f"cgroup v2: cannot enable the memory controller below {directory}: {why}") from None


def _remove_stale(parent: CgroupParent) -> None:
    """Run cgroups a memgap killed outright (SIGKILL: no finally ran) left behind, where empty."""
    for name in os.listdir(parent.directory):
        pid = name[len(PREFIX):].split("-")[0]
        if name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.rmdir(os.path.join(parent.directory, name))
            except OSError:
                pass  # still has processes: not ours to kill


class RunCgroup:
    """One run's memory cgroup (see the module's docstring); ``remove`` when the run is over."""

    def __init__(self, parent: CgroupParent, directory: str, limit: int | None) -> None:
        self.version, self.directory, self.limit = parent.version, directory, limit
        self.highest = 0  # memory.current's highest sample, for a v2 kernel without memory.peak
        self._procs = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def enter(self) -> None:
        """Move the calling process in; run in the child before exec (preexec_fn): one write
        to a file opened beforehand, no allocation nor lock taken there. "0" is the writer."""
        os.write(self._procs, b"0")

    def sample(self) -> None:
        self.highest = max(self.highest, read_usage(self.directory, self.version) or 0)

    def charge(self) -> RunCharge:
        """Its peak (the highest sample where the kernel keeps none) and OOM kills so far."""
        found = read_run_charge(self.directory, self.version)
        if found.peak is None and self.highest:
            return RunCharge(self.highest, found.oom_kills, found.limit_hits)
        return found

    def remove(self) -> None:
        """Kill what the run left in it (a daemon outside its process group), then remove it."""
        os.close(self._procs)
        deadline = time.monotonic() + GONE_WAIT
        while True:
            pids = _pids(self.directory)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.directory)
                return
            except OSError as exc:  # EBUSY while a killed process is still exiting
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise MemgapError(f"cannot remove the run's memory cgroup {self.directory}: "
                                      f"{exc.strerror or exc} (processes left in it: {pids or 'none'})") from None
            time.sleep(0.02)


def _pids(directory: str) -> list[int]:
    try:
        with open(os.path.join(directory, "cgroup.procs")) as fh:
            return [int(line) for line in fh if line.strip()]
    except OSError:
        return []


def make_run_cgroup(parent: CgroupParent, name: str, limit: int | None) -> RunCgroup:
    """A new cgroup under ``parent`` capped at ``limit`` bytes (None: no cap, for its peak alone);
    removed again if a limit cannot be written. Raises Unsupported with the reason."""
    directory = os.path.join(parent.directory, f"{PREFIX}{os.getpid()}-{name}")
    try:
        os.mkdir(directory)
        try:
            if limit is not None:
                _write_limit(parent.version, directory, limit)
            return RunCgroup(parent, directory, limit)
        except OSError:
            os.rmdir(directory)
            raise
    except OSError as exc:
        hint = " (run memgap as root)" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
        raise Unsupported(f"cannot make a memory cgroup under {parent.directory}: "
                          f"{exc.strerror or exc}{hint}") from None


def _write_limit(version: int, directory: str, limit: int) -> None:
    """The cap, and swap capped with it where the kernel accounts swap (so it cannot hide a charge)."""
    if version == 1:  # memsw (memory + swap) may not be set below memory's own limit: memory first
        writes = [("memory.limit_in_bytes", str(limit), True), ("memory.memsw.limit_in_bytes", str(limit), False)]
    else:
        writes = [("memory.max", str(limit), True), ("memory.swap.max", "0", False)]
    for name, value, needed in writes:
        path = os.path.join(directory, name)
        if not needed and not os.path.exists(path):
            continue  # no swap accounting in this kernel: no swap to hide in either
        with open(path, "w") as fh:
            fh.write(value)
