"""The memory cgroup a process runs in: the limit that kills it, and what the cgroup is charged.

In a container the OOM killer acts on the cgroup's charge, which holds page cache and
kernel memory that no process's RSS shows; dashboards show the working set as
Kubernetes computes it (usage minus inactive file). Both versions are read:
v2 (`memory.current`, `memory.max`, `memory.peak`, `memory.stat`) and v1, which this
project's Debian machine mounts (`memory.usage_in_bytes`, `memory.limit_in_bytes`,
`memory.max_usage_in_bytes`, `memory.stat`'s hierarchical `total_*` lines).
Parsers take the files' text; `read_memory_cgroup` is the thin reader. Read-only.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from memgap.documents.json_value import JsonObject
from memgap.errors import MalformedInput

UNLIMITED = 1 << 60  # v1 writes "no limit" as a page-rounded LLONG_MAX


@dataclass(frozen=True)
class CgroupMemory:
    """One memory cgroup's figures, in bytes (None where this kernel does not report one)."""

    version: int
    path: str                 # in its hierarchy, e.g. /kubepods/pod.../container
    usage: int                # charged now: v2 memory.current, v1 memory.usage_in_bytes
    limit: int | None         # the lowest limit from it up to the root; None: none
    peak: int | None          # v2 memory.peak (Linux 5.19+), v1 memory.max_usage_in_bytes
    anon: int
    file: int                 # page cache, shmem included (both versions count it there)
    active_file: int
    inactive_file: int
    shmem: int
    kernel: int | None        # v2 memory.stat kernel (5.18+), v1 memory.kmem.usage_in_bytes
    sock: int | None          # v2 memory.stat sock, v1 memory.kmem.tcp.usage_in_bytes
    swap: int | None

    @property
    def working_set(self) -> int:
        """usage - inactive file: what Kubernetes (kubectl top, the VPA, eviction) counts."""
        return max(0, self.usage - self.inactive_file)

    @property
    def reclaimable(self) -> int:
        """Page cache the kernel can drop under pressure before it OOM-kills: file pages
        but shmem (tmpfs, shared memory), which needs swap to leave."""
        return max(0, self.file - self.shmem)

    @property
    def headroom(self) -> int | None:
        return None if self.limit is None else self.limit - self.usage

    def to_dict(self) -> JsonObject:
        return {**asdict(self), "working_set": self.working_set, "reclaimable": self.reclaimable,
                "headroom": self.headroom}


def parse_stat(text: str, name: str = "memory.stat") -> dict[str, int]:
    """memory.stat, or another file of "key value" lines (``name``: the file, for the error)."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isdigit():
            raise MalformedInput(name, f"line {n}: {line[:80]!r}")
        out[parts[0]] = int(parts[1])
    return out


def _number(name: str, text: str | None) -> int | None:
    """One figure file: a number, or None where absent; v2's "max" is no limit."""
    if text is None:
        return None
    value = text.strip()
    if value == "max":
        return None
    if not value.isdigit():
        raise MalformedInput(name, f"not a number: {value[:40]!r}")
    return int(value)


def _lowest_limit(limits: list[int | None]) -> int | None:
    real = [v for v in limits if v is not None and v < UNLIMITED]
    return min(real) if real else None


def parse_v1(path: str, files: Mapping[str, str]) -> CgroupMemory:
    """A v1 memory cgroup from its files' text (memory.stat is required, the rest optional)."""
    stat = parse_stat(files["memory.stat"])
    usage = _number("memory.usage_in_bytes", files.get("memory.usage_in_bytes"))

    def total(key: str) -> int:  # the hierarchical figure where use_hierarchy gives one
        return stat.get(f"total_{key}", stat.get(key, 0))
    return CgroupMemory(
        version=1, path=path, usage=usage if usage is not None else total("rss") + total("cache"),
        limit=_lowest_limit([_number("memory.limit_in_bytes", files.get("memory.limit_in_bytes")),
                             stat.get("hierarchical_memory_limit")]),
        peak=_number("memory.max_usage_in_bytes", files.get("memory.max_usage_in_bytes")),
        anon=total("rss"), file=total("cache"), active_file=total("active_file"),
        inactive_file=total("inactive_file"), shmem=total("shmem"),
        kernel=_number("memory.kmem.usage_in_bytes", files.get("memory.kmem.usage_in_bytes")),
        sock=_number("memory.kmem.tcp.usage_in_bytes", files.get("memory.kmem.tcp.usage_in_bytes")),
        swap=stat.get("total_swap", stat.get("swap")))


def parse_v2(path: str, files: Mapping[str, str], ancestor_limits: Sequence[int | None] = ()) -> CgroupMemory:
    """A v2 memory cgroup from its files' text; ``ancestor_limits``: memory.max of each parent."""
    stat = parse_stat(files["memory.stat"])
    usage = _number("memory.current", files.get("memory.current"))
    kernel = stat.get("kernel")
    if kernel is None and "kernel_stack" in stat:  # before Linux 5.18: its parts
        kernel = sum(stat.get(k, 0) for k in ("kernel_stack", "pagetables", "percpu", "slab", "vmalloc"))
    return CgroupMemory(
        version=2, path=path, usage=usage if usage is not None else stat.get("anon", 0) + stat.get("file", 0),
        limit=_lowest_limit([_number("memory.max", files.get("memory.max")), *ancestor_limits]),
        peak=_number("memory.peak", files.get("memory.peak")),
        anon=stat.get("anon", 0), file=stat.get("file", 0), active_file=stat.get("active_file", 0),
        inactive_file=stat.get("inactive_file", 0), shmem=stat.get("shmem", 0), kernel=kernel,
        sock=stat.get("sock"), swap=_number("memory.swap.current", files.get("memory.swap.current")))


@dataclass(frozen=True)
class CgroupPlace:
    version: int
    path: str       # in the hierarchy, as /proc/PID/cgroup names it
    directory: str  # where its files are
    mount: str      # the hierarchy's mount point: the walk up to parents stops there


def find_memory_cgroup(cgroup_text: str, mountinfo_text: str) -> CgroupPlace | None:
    """Where the memory cgroup of a process is, from its /proc/PID/cgroup and a mountinfo;
    None where no memory controller is mounted."""
    lines = [line.split(":", 2) for line in cgroup_text.splitlines() if line.count(":") >= 2]
    v1 = next((p for _, ctrl, p in lines if "memory" in ctrl.split(",")), None)
    v2 = next((p for hid, ctrl, p in lines if hid == "0" and ctrl == ""), None)
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        root, point = fields[3], fields[4]
        fstype, _source, options = (line.split(" - ", 1)[1].split() + ["", ""])[:3]
        if fstype == "cgroup" and v1 is not None and "memory" in options.split(","):
            return CgroupPlace(1, v1, _join(point, root, v1), point)
        if fstype == "cgroup2" and v1 is None and v2 is not None:
            return CgroupPlace(2, v2, _join(point, root, v2), point)
    return None


def _join(point: str, root: str, path: str) -> str:
    """The directory of ``path`` under a mount of the hierarchy's ``root``."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return os.path.join(point, path.lstrip("/"))


V1_FILES = ("memory.stat", "memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes",
            "memory.kmem.usage_in_bytes", "memory.kmem.tcp.usage_in_bytes")
V2_FILES = ("memory.stat", "memory.current", "memory.max", "memory.peak", "memory.swap.current")


def _read_files(directory: str, names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            with open(os.path.join(directory, name)) as fh:
                out[name] = fh.read()
        except OSError:
            continue
    return out


def read_memory_cgroup(pid: int | str, proc_root: str = "/proc") -> CgroupMemory | None:
    """The memory cgroup of ``pid``, or None where it has none this process can read
    (no memory controller mounted here, another cgroup namespace, no permission)."""
    try:
        with open(f"{proc_root}/{pid}/cgroup") as fh:
            cgroup_text = fh.read()
        with open(f"{proc_root}/self/mountinfo") as fh:
            mountinfo_text = fh.read()
    except OSError:
        return None
    place = find_memory_cgroup(cgroup_text, mountinfo_text)
    if place is None:
        return None
    files = _read_files(place.directory, V1_FILES if place.version == 1 else V2_FILES)
    if "memory.stat" not in files:
        return None
    if place.version == 1:  # its memory.stat says the lowest limit up the tree
        return parse_v1(place.path, files)
    limits, parent = [], os.path.dirname(place.directory)
    while parent.startswith(place.mount) and len(parent) > len(place.mount):  # the root has no memory.max
        limits.append(_number("memory.max", _read_files(parent, ("memory.max",)).get("memory.max")))
        parent = os.path.dirname(parent)
    return parse_v2(place.path, files, limits)


@dataclass(frozen=True)
class RunCharge:
    """What a memory cgroup made for one run saw: its highest charge and the kernel's OOM kills."""

    peak: int | None        # v1 memory.max_usage_in_bytes, v2 memory.peak; None where not kept
    oom_kills: int | None   # v1 memory.oom_control oom_kill (4.13+), v2 memory.events oom_kill
    limit_hits: int | None  # times the charge reached the limit: v1 memory.failcnt, v2 memory.events max


def parse_run_charge(version: int, files: Mapping[str, str]) -> RunCharge:
    """A run cgroup's peak and OOM figures from its files' text (any of them may be absent).
    A fresh cgroup per run makes them the run's own: no earlier figure to subtract."""
    if version == 1:
        oom = parse_stat(files["memory.oom_control"], "memory.oom_control") if "memory.oom_control" in files else {}
        return RunCharge(_number("memory.max_usage_in_bytes", files.get("memory.max_usage_in_bytes")),
                         oom.get("oom_kill"), _number("memory.failcnt", files.get("memory.failcnt")))
    events = parse_stat(files["memory.events"], "memory.events") if "memory.events" in files else {}
    return RunCharge(_number("memory.peak", files.get("memory.peak")), events.get("oom_kill"), events.get("max"))


RUN_FILES = {1: ("memory.max_usage_in_bytes", "memory.oom_control", "memory.failcnt"),
             2: ("memory.peak", "memory.events")}


def read_run_charge(directory: str, version: int) -> RunCharge:
    """The figures of the run cgroup at ``directory`` (see parse_run_charge)."""
    return parse_run_charge(version, _read_files(directory, RUN_FILES[version]))


def read_usage(directory: str, version: int) -> int | None:
    """The cgroup's charge now (v1 memory.usage_in_bytes, v2 memory.current); None if unreadable."""
    name = "memory.usage_in_bytes" if version == 1 else "memory.current"
    try:
        return _number(name, _read_files(directory, (name,)).get(name))
    except MalformedInput:
        return None
