"""Remedies as code: an idle trimmer, and the environment for spawned children.

    trimmer = memgap.Trimmer().start()      # trims after bursts, when the process goes quiet
    env = memgap.spawn_env(MALLOC_ARENA_MAX="2")
    env = memgap.preload_env("jemalloc", background_thread="true", dirty_decay_ms="1000")
    memgap.verify_env(child.pid, env)       # what actually reached the child
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from memgap.errors import Unsupported
from memgap.record.envnames import PYMALLOC_RELEASE_ENV
from memgap.report.units import MiB
from memgap.sources.procfs import ProcReader, status_int


@dataclass
class TrimmerStats:
    trims: int = 0
    released: int = 0       # bytes of RSS the trims gave back, measured from VmRSS
    seconds: float = 0.0    # time spent inside malloc_trim
    checks: int = 0


class Trimmer:
    """Call ``malloc_trim(0)`` when the process has gone quiet after a burst.

    Every ``interval`` seconds it reads ``mallinfo2()`` (a few microseconds). A
    burst is over when the bytes in use have not moved by more than
    ``quiet_change`` for ``quiet`` seconds; it trims then, once per burst, if
    glibc holds at least ``min_free`` bytes free. With MEMGAP_PYMALLOC_RELEASE=1
    each trim also gives back pymalloc's empty pools, and pymalloc's allocated
    blocks (``sys.getallocatedblocks()``) count as a burst too: a burst of small
    Python objects barely moves glibc's figures; the glibc floor then does not
    apply, since pymalloc's free pools are not in it. The cost is bounded: at most
    one trim per ``min_gap`` seconds, and after a trim that gave back less than
    1 MiB the gap doubles (up to 64 times) until one releases again. glibc only: elsewhere
    ``start()`` raises Unsupported.
    """

    def __init__(self, interval: float = 1.0, quiet: float = 2.0, min_free: int = 16 * MiB,
                 quiet_change: float = 0.02, min_gap: float = 10.0,
                 on_trim: Callable[[int, int], None] | None = None,
                 on_timed_trim: Callable[[int, int, TrimTimes], None] | None = None) -> None:
        """``on_trim(rss_before, rss_after)`` is called after each trim, from the trimmer's thread;
        ``on_timed_trim(rss_before, rss_after, times)`` too, with the trim's ``TrimTimes``."""
        self.interval, self.quiet, self.min_free = interval, quiet, min_free
        self.quiet_change, self.min_gap = quiet_change, min_gap
        self.on_trim, self.on_timed_trim = on_trim, on_timed_trim
        self.stats = TrimmerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Trimmer:
        from memgap.allocators.detect import detect_in_process
        from memgap.allocators.registry import reader_for
        from memgap.sources.glibc import glibc_malloc

        detection = detect_in_process(ProcReader("self").maps())
        if not reader_for(detection.name).libc_calls:
            raise Unsupported(f"the trimmer needs glibc's malloc; this process runs {detection.name}")
        self._libc = glibc_malloc()
        # imported here, not in the thread: a fork() while the thread imported it would leave
        # the child a half-made module (a forked worker's trimmer then failed to start)
        from memgap.inside.pymalloc_release import release_if_asked

        self._release = release_if_asked
        self._thread = threading.Thread(target=self._loop, name="memgap-trimmer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Trimmer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        status = ProcReader("self")
        pools = os.environ.get(PYMALLOC_RELEASE_ENV) == "1"
        last_in_use = last_blocks = None
        quiet_since = time.monotonic()
        burst_since_trim = True  # whatever came before the trimmer started counts as a burst
        next_allowed = 0.0
        gap = self.min_gap
        while not self._stop.wait(self.interval):
            info = self._libc.mallinfo2()
            self.stats.checks += 1
            now = time.monotonic()
            in_use = info.in_use
            blocks = sys.getallocatedblocks() if pools else 0  # O(arenas): sums a counter per arena
            if (last_in_use is None or abs(in_use - last_in_use) > self.quiet_change * max(last_in_use, MiB)
                    or abs(blocks - (last_blocks or 0)) > self.quiet_change * max(last_blocks or 0, 1024)):
                quiet_since = now
                burst_since_trim = True
            last_in_use, last_blocks = in_use, blocks
            # glibc still counts pages it gave back as free: fordblks alone cannot say a trim is due,
            # so only a burst since the last trim makes one worth doing.
            if (not burst_since_trim or now - quiet_since < self.quiet or now < next_allowed
                    or (info.fordblks < self.min_free and not pools)):
                continue
            released = self._trim(status)
            burst_since_trim = False
            gap = self.min_gap if released >= MiB else min(gap * 2, self.min_gap * 64)
            next_allowed = now + gap

    def _trim(self, status: ProcReader) -> int:
        """One trim, timed, and its callbacks; the RSS it gave back."""
        before, after, times = timed_trim(self._trim_calls, status)
        if self.on_trim is not None:
            self.on_trim(before, after)
        if self.on_timed_trim is not None:
            self.on_timed_trim(before, after, times)
        self.stats.trims += 1
        self.stats.seconds += times.inside
        self.stats.released += max(0, before - after)
        return max(0, before - after)

    def _trim_calls(self) -> None:
        self._libc.trim(0)
        self._release()


@dataclass(frozen=True)
class TrimTimes:
    """When one trim ran (``time.time()`` as it began and as it ended: a lab tells memgap's own CPU
    from the workload's by them), its thread's CPU seconds meanwhile (``time.thread_time()``: the
    trim's, the kernel's freeing of the pages included), and the seconds inside the trim calls."""

    started: float
    ended: float
    cpu: float
    inside: float


def timed_trim(trim: Callable[[], object], status: ProcReader) -> tuple[int, int, TrimTimes]:
    """Call ``trim`` between two reads of this process's VmRSS: (RSS before, RSS after, its times)."""
    started, cpu = time.time(), time.thread_time()
    before = status_int(status.status(), "VmRSS")
    took = time.perf_counter()
    trim()
    inside = time.perf_counter() - took
    after = status_int(status.status(), "VmRSS")
    return before, after, TrimTimes(started, time.time(), time.thread_time() - cpu, inside)


def spawn_env(base: dict[str, str] | None = None, **settings: str) -> dict[str, str]:
    """The environment for a child process with allocator ``settings``.

    A value the user already set (in ``base``, default os.environ) wins: the
    setting is theirs, and memgap does not override it.
    """
    env = dict(os.environ if base is None else base)
    for key, value in settings.items():
        env.setdefault(key, str(value))
    return env


def preload_env(allocator: str, base: dict[str, str] | None = None, **options: str) -> dict[str, str]:
    """The environment that runs a child under ``allocator`` (jemalloc, tcmalloc, mimalloc).

    The allocator goes in front of an existing LD_PRELOAD; jemalloc's options
    become MALLOC_CONF, the others' their TCMALLOC_*/MIMALLOC_* variables.
    Raises Unsupported when the allocator is not installed (with the install line).
    """
    from memgap.allocators.catalog import find_library, install_hint, preloaded
    from memgap.allocators.variants import parse_variant

    spec = allocator + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else "")
    variant = parse_variant(spec)
    if not variant.preloads:
        raise Unsupported("glibc is already the default allocator: use spawn_env for its tunables")
    library = find_library(variant.allocator)
    if library is None:
        raise Unsupported(f"{allocator} is not installed here: {install_hint(variant.allocator)}")
    env = dict(os.environ if base is None else base)
    env.update(variant.env())  # its options (no library set on the variant: LD_PRELOAD comes from ``base``)
    env["LD_PRELOAD"] = preloaded(library, env.get("LD_PRELOAD", ""))
    return env


def verify_env(pid: int, expected: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """Which of ``expected`` did not reach process ``pid``: name -> (found, wanted).

    Reads /proc/PID/environ (the environment the process started with) and, for
    LD_PRELOAD, also checks that each preloaded library is mapped.
    """
    reader = ProcReader(pid)
    actual = reader.environ()
    missing = {k: (actual.get(k), v) for k, v in expected.items() if actual.get(k) != v}
    if "LD_PRELOAD" in expected and "LD_PRELOAD" not in missing:
        mapped = {m.path for m in reader.maps()}
        for library in expected["LD_PRELOAD"].split():
            if os.path.realpath(library) not in {os.path.realpath(p) for p in mapped if p.startswith("/")}:
                missing["LD_PRELOAD"] = (f"{library} not mapped", expected["LD_PRELOAD"])
    return missing
