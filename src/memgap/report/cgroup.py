"""The memory cgroup's view beside a process's breakdown: the figures a container's
dashboards and its OOM killer go by, and how they relate to the process's RSS."""
from __future__ import annotations

from memgap.report.units import mib
from memgap.sources.cgroup import CgroupMemory


def cgroup_lines(cgroup: CgroupMemory, rss: int, pss: int | None) -> list[str]:
    """Lines for people: the cgroup's charge, limit, peak, split, working set, and what of it
    the kernel can reclaim before an OOM kill (every figure from the cgroup's own files)."""
    c = cgroup
    limit = f"limit {mib(c.limit)} MiB, headroom {mib(c.headroom)} MiB" if c.limit is not None else "no limit"
    peak = f", peak {mib(c.peak)} MiB" if c.peak is not None else ""
    extra = "".join(f", {name} {mib(value)}" for name, value in (("kernel", c.kernel), ("sock", c.sock),
                                                                 ("swap", c.swap)) if value is not None)
    return [
        f"memory cgroup {c.path} (v{c.version}): usage {mib(c.usage)} MiB, {limit}{peak}",
        f"  charged, MiB: anon {mib(c.anon)}, page cache {mib(c.file)} (active {mib(c.active_file)}, "
        f"inactive {mib(c.inactive_file)}, shmem {mib(c.shmem)}){extra}",
        f"  working set {mib(c.working_set)} MiB (usage - inactive file: what Kubernetes and kubectl top show)",
        f"  the kernel can reclaim {mib(c.reclaimable)} MiB of page cache (file - shmem) before an OOM kill; "
        f"the other {mib(max(0, c.usage - c.reclaimable))} MiB counts toward one",
        f"  this process: RSS {mib(rss)} MiB" + (f", PSS {mib(pss)} MiB" if pss is not None else "")
        + " of the cgroup's usage (every process of the cgroup, and its page cache, is charged there)",
    ]
