"""Arrow's memory pool's own settings as lab variants (``arrow:pool=system``, ``arrow:purge_delay=0``), given
to an unmodified program through its environment, as libarrow reads it when its default pool is first made:

- ``pool``: ARROW_DEFAULT_MEMORY_POOL, which allocator backs the default pool: ``mimalloc`` (the pip
  wheel's default, bundled in libarrow under the prefix ``arrow_``), ``jemalloc`` (bundled too, ``je_arrow_``)
  or ``system`` (the process's malloc: glibc's, where malloc_trim and glibc's settings reach it).
- ``purge_delay``, ``allow_thp``, ``arena_eager_commit``: the bundled mimalloc's own options, which it reads
  from MIMALLOC_PURGE_DELAY, MIMALLOC_ALLOW_THP and MIMALLOC_ARENA_EAGER_COMMIT (mimalloc 3.4.1 in pyarrow
  26.0.1: MIMALLOC_VERBOSE=1 prints the values it took, so the variables reach the bundled copy despite its
  prefix). ``purge_delay``: milliseconds before freed memory is given back (0: at once, -1: never);
  ``allow_thp``: 0 keeps transparent huge pages off its arenas (a huge page stays whole in RSS until the
  kernel splits it, whatever mimalloc gave back of it); ``arena_eager_commit``: 0 commits arena memory as
  it is used.

Measured by ``memgap lab --reps 2`` on tests/programs/arrow_pool.py (8 threads build, sort, group and drop
tables of 150,000 rows, then 2 s of rest; load 9-13 on 2 cores), idle RSS median (range): the defaults 244
MiB (237-251); pool=jemalloc 113 (112-114) at x1.07; purge_delay=0 114 (114-114) at x2.24; pool=system 129
(124-135) at x1.15; allow_thp=0 181 (180-182).
"""
from __future__ import annotations

from collections.abc import Mapping

from memgap.runtimes import register_settings
from memgap.runtimes.settings import RuntimeSettings, one_of, whole

ENV = {"pool": "ARROW_DEFAULT_MEMORY_POOL", "purge_delay": "MIMALLOC_PURGE_DELAY", "allow_thp": "MIMALLOC_ALLOW_THP",
       "arena_eager_commit": "MIMALLOC_ARENA_EAGER_COMMIT"}


def env(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    return {ENV[key]: value for key, value in options.items()}


def variants(peak: int | None) -> tuple[str, ...]:
    """Each other backend of the pool, and the bundled mimalloc giving memory back at once, without huge pages."""
    return ("arrow:pool=system", "arrow:pool=jemalloc", "arrow:purge_delay=0", "arrow:allow_thp=0")


def _purge_delay(value: str) -> str:
    return "" if value == "-1" else whole(0)(value) and "milliseconds: a whole number of at least 0, or -1 (never)"


SETTINGS = RuntimeSettings(
    runtime="arrow", prefix="arrow",
    keys={"pool": one_of("mimalloc", "jemalloc", "system"), "purge_delay": _purge_delay,
          "allow_thp": one_of("0", "1"), "arena_eager_commit": one_of("0", "1", "2")},
    env=env, variants=variants, libraries=("libarrow.so",),
    found="bundles its own allocator beside malloc's: its memory pool's own settings",
    notes=("libarrow reads ARROW_DEFAULT_MEMORY_POOL when its default pool is first used, and its bundled "
           "mimalloc reads its MIMALLOC_* options when it starts; a program that picks a pool itself "
           "(pyarrow.set_memory_pool, a pool passed to a call) overrides the first",))
register_settings(SETTINGS)
