"""memgap's metrics for prometheus_client, in the process that registers them on itself.

    from prometheus_client import start_http_server
    from memgap.prometheus import MemgapCollector

    MemgapCollector()          # registered on prometheus_client's default registry
    start_http_server(8000)

The families are those of `memgap serve-metrics` (see memgap.metrics.export), with the same
``role``/``index``/``allocator`` labels, so one dashboard serves both. Each collection takes an
in-process snapshot: measured on the 2-core machine at 5-7 ms for a 61 MiB process and 16-18 ms
for 469 MiB, against 12-15 and 90 ms for reading itself from outside, whose buffers also grew
the process's own RSS by 11 MiB. In-process also counts Python's objects over 512 bytes, which
the outside cannot; it has no PSS per layer (``memgap_layer_pss_bytes`` is left out).

This module imports prometheus_client; ``import memgap`` does not import this module.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

try:
    from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError as exc:  # the one optional dependency: say how to get it
    raise ImportError("memgap.prometheus needs prometheus_client, which is not installed: "
                      "pip install prometheus-client (or memgap[prometheus])") from exc

from memgap.errors import MemgapError
from memgap.explain.snapshot import SnapshotOptions, snapshot_self
from memgap.metrics.export import Family, Target, command_name, process_families, scrape_families
from memgap.sources.procfs import ProcReader


def _metric(family: Family) -> Metric:
    """A memgap family as prometheus_client's (label names are the same on each of its samples)."""
    names = [k for k, _ in family.samples[0][0]] if family.samples else []
    cls = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
    out = cls(family.name, family.help, labels=names)
    for labels, value in family.samples:
        out.add_metric([v for _, v in labels], value)
    return out


class MemgapCollector(Collector):
    """This process's RSS by layer, PSS, USS, what a trim would release, its memory cgroup, and
    what each collection cost; registered on ``registry`` (None: not registered)."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY, role: str | None = None,
                 index: int = 0) -> None:
        self.errors_total = 0
        self.role = role if role is not None else command_name(ProcReader("self").cmdline())
        self.index = index
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterator[Metric]:
        """The families' names, without a snapshot (the registry asks at register())."""
        for family in [*process_families([]), *scrape_families(0, 0.0, 0)]:
            yield _metric(family)

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        try:
            targets = [Target(snapshot_self(options=SnapshotOptions(regions=False)), self.role, self.index)]
        except MemgapError:
            self.errors_total += 1
            targets = []
        took = time.perf_counter() - started
        for family in [*process_families(targets), *scrape_families(len(targets), took, self.errors_total)]:
            if family.samples:
                yield _metric(family)
