"""A pytest plugin: fail a test that leaves the process's RSS higher than a limit.

Off unless asked: the marker ``@pytest.mark.memgap_retained("50 MiB", warmup=1)`` on a
test, or ``--memgap-retained SIZE`` for every test; ``--memgap`` adds a summary of the
tests that retained most. A test marked runs ``warmup`` times first (caches, imports and
pools filled once are not what it retains), then once measured: RSS is read when the
process is quiet before and after it (RSS steady for 0.2 s, after a full collection),
and what it kept is the difference. A failure prints the layered breakdown of the
process, so the retained memory has a name (Python objects, C allocator free, ...).

RSS, not the heap: what retention costs a long-lived process, allocator retention
included (pytest-memray's limits count allocations instead). Loaded by pytest through
its entry point in every session, so it lives outside the memgap package (importing
that loads memgap's modules) and imports memgap only when a test asks for it.
"""
from __future__ import annotations

import gc
import os
import re
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

SETTLE = 0.2     # seconds RSS must hold still to be read
STEADY = 1 << 20  # bytes it may move meanwhile and still count as still
SETTLE_LIMIT = 3.0
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str | int | None) -> int:
    """ "50 MiB", "1.5G", "4096" -> bytes (binary units: MB means MiB, as in memgap's output); None
    (a marker without its size) raises as any other non-size does."""
    if isinstance(text, int):
        return text
    found = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", str(text))
    if not found or found.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (say 50 MiB, 1.5 GiB, or bytes)")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settled_rss() -> int:
    """RSS once a full collection has run and it held still for SETTLE seconds (or after
    SETTLE_LIMIT, the last reading)."""
    gc.collect()
    deadline = time.monotonic() + SETTLE_LIMIT
    last = _rss()
    while True:
        time.sleep(SETTLE)
        now = _rss()
        if abs(now - last) <= STEADY or time.monotonic() > deadline:
            return now
        last = now


@dataclass
class Retained:
    nodeid: str
    before: int
    after: int
    limit: int | None

    @property
    def retained(self) -> int:
        return self.after - self.before


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memgap", "memory a test leaves behind (RSS), by memgap")
    group.addoption("--memgap", action="store_true", help="measure every test's retained RSS and summarise the most")
    group.addoption("--memgap-retained", metavar="SIZE", default=None,
                    help="fail any test that retains more than SIZE of RSS (e.g. 50MiB); a marker's limit wins")


_RESULTS = pytest.StashKey[list[Retained]]()  # each measured test's record, for the summary


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "memgap_retained(limit, warmup=0): fail when the test leaves RSS more than "
                                       "`limit` higher (after `warmup` unmeasured runs)")
    config.stash[_RESULTS] = []


def _limit_of(item: pytest.Item) -> tuple[int | None, int]:
    """The test's limit (bytes, or None: not measured against one) and its warm-up runs."""
    marker = item.get_closest_marker("memgap_retained")
    if marker is not None:
        limit = marker.args[0] if marker.args else marker.kwargs.get("limit")
        return parse_size(limit), int(marker.kwargs.get("warmup", 0))
    default = item.config.getoption("--memgap-retained")
    return (parse_size(default) if default else None), 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    limit, warmup = _limit_of(item)
    if limit is None and not item.config.getoption("--memgap"):
        return (yield)
    for _ in range(warmup):
        item.runtest()
    before = settled_rss()
    result = yield
    after = settled_rss()
    record = Retained(item.nodeid, before, after, limit)
    item.config.stash[_RESULTS].append(record)
    if limit is not None and record.retained > limit:
        pytest.fail(_failure(record, warmup), pytrace=False)
    return result


def _failure(record: Retained, warmup: int) -> str:
    from memgap.api import snapshot
    from memgap.report.terminal import render_text
    from memgap.units import mib

    head = (f"memgap: the test left RSS {mib(record.retained)} MiB higher ({mib(record.before)} -> "
            f"{mib(record.after)} MiB, each read once it held still after a full collection"
            + (f", after {warmup} warm-up run{'s' * (warmup != 1)}" if warmup else "")
            + f"), over its limit of {mib(record.limit)} MiB. Where the process's memory is now:")
    return head + "\n" + render_text(snapshot(walk=True), width=100)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, [])
    if not config.getoption("--memgap") or not results:
        return
    from memgap.units import mib

    terminalreporter.section("memgap: RSS retained by test (read after a full collection, once still)")
    for r in sorted(results, key=lambda r: -r.retained)[:10]:
        limit = f" (limit {mib(r.limit)})" if r.limit is not None else ""
        terminalreporter.write_line(f"{mib(r.retained):>9} MiB  {r.nodeid}{limit}")
