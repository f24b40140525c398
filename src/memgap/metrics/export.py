"""Snapshots as Prometheus metrics: pure, from typed records to the text exposition format 0.0.4.

Prometheus's conventions: base units (bytes, seconds) in the name's suffix, ``_total`` on
counters, one metric with a ``layer`` label rather than one metric per layer, and labels of
low cardinality only. There is no ``pid`` label: a restarted worker would start new series
(every restart of every worker, for as long as the data is kept); a process is named by its
``role`` (``master``/``worker`` in a tree, else its command's name) and its ``index``, its
place by start time among the processes of its role (0..n-1).

Reading processes is the caller's (``memgap serve-metrics``, ``memgap.prometheus``); here
only data in, families and text out.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memgap.documents.snapshot import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LabelSet = tuple[tuple[str, str], ...]

_PYTHON = ("python", "pypy")


@dataclass(frozen=True)
class Process:
    """A process found for a scrape: what its labels are made from."""

    pid: int
    start: int            # start time (clock ticks after boot): with the PID, one process
    cmdline: tuple[str, ...]
    root: bool = False    # the root of a --tree (its "master")


@dataclass(frozen=True)
class Target:
    """One process's snapshot with the labels its series carry."""

    snapshot: Snapshot
    role: str
    index: int

    @property
    def labels(self) -> LabelSet:
        return (("role", self.role), ("index", str(self.index)),
                ("allocator", self.snapshot.allocator.name or "unknown"))


@dataclass
class Family:
    """One metric: its name (as its samples carry it), type, help, and samples."""

    name: str
    type: str  # "gauge" or "counter"
    help: str
    samples: list[tuple[LabelSet, float]] = field(default_factory=list)

    def add(self, labels: LabelSet, value: float | None) -> None:
        if value is not None:
            self.samples.append((labels, value))


def command_name(cmdline: Sequence[str]) -> str:
    """A process's name for its ``role`` label: the program's basename, or for an
    interpreter the script or module it runs (``gunicorn``, not ``python3.11``)."""
    if not cmdline:
        return "unknown"
    name = os.path.basename(cmdline[0]) or "unknown"
    if not name.startswith(_PYTHON):
        return name
    args = list(cmdline[1:])
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args.pop(0)  # interpreter options (-u, -X dev would take one more: rare enough)
    if len(args) >= 2 and args[0] == "-m":
        return args[1]
    if args and args[0] != "-c":
        return os.path.basename(args[0]) or name
    return name


def label_tree(processes: Iterable[Process]) -> dict[int, tuple[str, int]]:
    """PID -> (role, index) in a tree: its root is ``master`` 0, every descendant a ``worker``
    numbered by start time (0..n-1), so a restarted worker takes an index again, not a new pid."""
    procs = list(processes)
    out = {p.pid: ("master", 0) for p in procs if p.root}
    workers = sorted((p for p in procs if not p.root), key=lambda p: (p.start, p.pid))
    out.update({p.pid: ("worker", i) for i, p in enumerate(workers)})
    return out


def label_by_command(processes: Iterable[Process]) -> dict[int, tuple[str, int]]:
    """PID -> (role, index) for unrelated processes: the role is the command's name, the index
    its place by start time among the processes of that name."""
    out: dict[int, tuple[str, int]] = {}
    seen: dict[str, int] = {}
    for p in sorted(processes, key=lambda p: (p.start, p.pid)):
        role = command_name(p.cmdline)
        out[p.pid] = (role, seen.get(role, 0))
        seen[role] = seen.get(role, 0) + 1
    return out


def _family(name: str, help_text: str, kind: str = "gauge") -> Family:
    return Family(name, kind, help_text)


def process_families(targets: Sequence[Target]) -> list[Family]:
    """The per-process families: RSS and its layers, PSS and USS, the allocator's figures,
    and each memory cgroup once (however many targets run in it)."""
    rss = _family("memgap_rss_bytes", "Resident set size (VmRSS) of the process.")
    layer = _family("memgap_memory_bytes", "Resident bytes of the process by layer; the layers plus "
                    "memgap_unexplained_bytes add up to memgap_rss_bytes. Layers not measured are left out.")
    unexplained = _family("memgap_unexplained_bytes", "VmRSS minus the measured layers.")
    pss = _family("memgap_pss_bytes", "Proportional set size of the process (smaps_rollup): shared pages "
                  "split among their sharers; sums over a tree to what it costs.")
    uss = _family("memgap_uss_bytes", "Private bytes of the process (USS): what its exit would free.")
    layer_pss = _family("memgap_layer_pss_bytes", "The process's PSS by layer, where measured (from outside); "
                        "with memgap_pss_unexplained_bytes they add up to memgap_pss_bytes.")
    pss_unexplained = _family("memgap_pss_unexplained_bytes", "PSS minus the layers' PSS, where measured.")
    releasable = _family("memgap_allocator_free_releasable_bytes",
                         "Of the allocator_free layer, what malloc_trim(0) would give back to the system (glibc).")
    fragmented = _family("memgap_allocator_free_fragmented_bytes",
                         "Of the allocator_free layer, free bytes on pages that also hold a live chunk: no trim "
                         "releases them (glibc).")
    arenas = _family("memgap_glibc_arenas", "glibc malloc arenas in the process (main arena included).")
    copied = _family("memgap_copied_from_parent_bytes", "A forked worker's private bytes that its parent has its "
                     "own copy of (copy on write; --tree only), by where they fall (pymalloc's arenas, glibc's heaps, "
                     "...): reads and collections of the parent's Python objects copy their pages.")
    cg_usage = _family("memgap_cgroup_usage_bytes", "Memory charged to the memory cgroup (page cache and "
                       "kernel memory included): what its OOM killer acts on.")
    cg_limit = _family("memgap_cgroup_limit_bytes", "The lowest memory limit from the cgroup up its tree.")
    cg_ws = _family("memgap_cgroup_working_set_bytes", "usage minus inactive file: the working set as "
                    "Kubernetes counts it (kubectl top, the VPA).")
    cg_reclaim = _family("memgap_cgroup_reclaimable_bytes", "Page cache the kernel can drop before it "
                         "OOM-kills (file pages but shmem).")
    cgroups_seen: set[tuple[int, str]] = set()
    for t in targets:
        s, labels = t.snapshot, t.labels
        rss.add(labels, s.rss)
        for name, lay in s.layers.items():
            layer.add(labels + (("layer", name),), lay.resident)
            layer_pss.add(labels + (("layer", name),), lay.pss)
        unexplained.add(labels, s.unexplained)
        pss.add(labels, s.pss)
        uss.add(labels, s.uss)
        pss_unexplained.add(labels, s.pss_unexplained)
        free = s.layers.get("allocator_free")
        detail = free.detail if free is not None else {}
        releasable.add(labels, detail.get("trim_releasable"))
        fragmented.add(labels, detail.get("fragmented"))
        arenas.add(labels, detail.get("arena_count"))
        for group, n in (s.copied_from_parent.by_group if s.copied_from_parent else {}).items():
            copied.add(labels + (("group", group),), n)
        cg = s.cgroup
        if cg is not None and (cg.version, cg.path) not in cgroups_seen:
            cgroups_seen.add((cg.version, cg.path))
            where: LabelSet = (("cgroup", cg.path),)
            cg_usage.add(where, cg.usage)
            cg_limit.add(where, cg.limit)
            cg_ws.add(where, cg.working_set)
            cg_reclaim.add(where, cg.reclaimable)
    return [rss, layer, unexplained, pss, uss, layer_pss, pss_unexplained, releasable, fragmented, arenas, copied,
            cg_usage, cg_limit, cg_ws, cg_reclaim, *gpu_families(targets)]


def gpu_families(targets: Sequence[Target]) -> list[Family]:
    """Device memory beside RSS, per GPU (its index: a label of few values), where a process has a GPU
    context and the driver counts it; and PyTorch's caching allocator where it was read in the process."""
    device = _family("memgap_gpu_memory_bytes", "GPU memory used by the process as the driver counts it (NVML), "
                     "per GPU: beside memgap_rss_bytes, never in it. Only for processes with a GPU context.")
    torch = _family("memgap_torch_cuda_bytes", "PyTorch's CUDA caching allocator in the process "
                    "(torch.cuda.memory_stats()): allocated, reserved, inactive_split.")
    for t in targets:
        gpu = t.snapshot.gpu
        for d in gpu.devices if gpu is not None else []:
            device.add(t.labels + (("gpu", str(d.index)),), d.used)
        cache = gpu.torch if gpu is not None else None
        if cache is not None:
            for kind, value in (("allocated", cache.allocated), ("reserved", cache.reserved),
                                ("inactive_split", cache.inactive_split)):
                torch.add(t.labels + (("kind", kind),), value)
    return [device, torch]


def scrape_families(processes: int, seconds: float, errors_total: int, up: bool | None = None) -> list[Family]:
    """The scrape's own families: how many processes it read, what it cost, its errors so far,
    and (``up`` not None: a PID given, or a tree's root) whether that process is still there."""
    read = _family("memgap_processes", "Processes read for the figures served (a target that exited is left out).")
    read.add((), processes)
    took = _family("memgap_scrape_duration_seconds", "Wall time memgap took to answer this scrape (reading the "
                   "processes included where it reads them at the scrape).")
    took.add((), seconds)
    errors = _family("memgap_scrape_errors_total", "Processes memgap failed to read (permission, malformed "
                     "/proc text), over every scrape since it started; a process that exited is no error.",
                     "counter")
    errors.add((), errors_total)
    target = _family("memgap_target_up", "1 while the PID given (or the tree's root) is the process memgap found "
                     "at its start; 0 once it exited or its PID names another process, which is not followed.")
    target.add((), None if up is None else int(up))
    return [read, took, errors, target]


def collection_families(age: float, cpu: float, collections: int) -> list[Family]:
    """How old the figures served are and what reading them cost (``memgap serve-metrics``)."""
    age_f = _family("memgap_collection_age_seconds", "Seconds since the collection served began: the per-process "
                    "figures are cached between collections (serve-metrics --refresh), none is older than this.")
    age_f.add((), age)
    cpu_f = _family("memgap_collection_seconds", "CPU time (user + system) memgap spent reading every process "
                    "for the collection served.")
    cpu_f.add((), cpu)
    count = _family("memgap_collections_total", "Collections (reads of every process) completed since memgap "
                    "started.", "counter")
    count.add((), collections)
    return [age_f, cpu_f, count]


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _value(value: float) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The text exposition format 0.0.4: HELP and TYPE before each family's samples; a family
    with no samples is left out (Prometheus would show it as nothing anyway)."""
    lines: list[str] = []
    for f in families:
        if not f.samples:
            continue
        lines.append(f"# HELP {f.name} {_escape_help(f.help)}")
        lines.append(f"# TYPE {f.name} {f.type}")
        for labels, value in f.samples:
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            lines.append(f"{f.name}{{{text}}} {_value(value)}" if text else f"{f.name} {_value(value)}")
    return "\n".join(lines) + "\n" if lines else ""
