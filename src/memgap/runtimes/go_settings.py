"""Go's own settings as lab variants (``go:gogc=50``, ``go:memlimit=256MiB``, ``go:madvdontneed=1``),
given to an unmodified Go program through its environment, as the runtime reads it at start
(runtime/mgcpacer.go readGOGC and readGOMEMLIMIT, runtime1.go parsegodebug; Go 1.26 read):

- ``gogc``: GOGC, the heap's growth over the live heap before the next collection (100 by default;
  ``off``: none). Lower: a smaller heap between collections, more collections.
- ``memlimit``: GOMEMLIMIT, a soft limit on the runtime's whole memory, in Go's own syntax (a byte
  count, or one with B, KiB, MiB, GiB or TiB). Over it the runtime collects more often and gives free
  pages back at once, not only those its background scavenger may take (it leaves pages alone for a
  whole collection cycle after they were densely used).
- ``madvdontneed``: GODEBUG's madvdontneed: 1 (Go's default on Linux since 1.16) gives pages back
  with MADV_DONTNEED, so they leave RSS at once; 0 with MADV_FREE, which leaves them in RSS until the
  kernel wants them. It matters for programs built with Go 1.12-1.15, or run with 0.

GOGC or GOMEMLIMIT that Go cannot read is not refused by Go in every case (a bad GOGC is taken as 100
without a word): the spec is checked here instead. GODEBUG keeps the user's own entries, before ours
(Go takes the last entry of a name).

Measured on a program that builds a 200 MiB cache with 4x as much scratch, drops 90% of it, collects
once (``runtime.GC()``) and rests 2 s (tests/programs/rtlab/grow_drop.go; Go 1.26, 2 cores): RSS at
rest 338 MiB under the defaults, 263 with GOGC=50, 241 with GOGC=25, 237 with GOMEMLIMIT=250MiB (74%
of the default's peak), 23 with GOMEMLIMIT=100MiB (below the live peak: collections all along the
growth); GODEBUG=madvdontneed=0 329.
"""
from __future__ import annotations

from collections.abc import Mapping

from memgap.runtimes import register_settings
from memgap.runtimes.settings import RuntimeSettings, appended, mib_of, one_of, pattern, whole

MEMLIMIT_SHARE = 0.75  # of the baseline's peak RSS: above a live heap that is half its peak (GOGC=100)


def env(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    if "gogc" in options:
        out["GOGC"] = options["gogc"]
    if "memlimit" in options:
        out["GOMEMLIMIT"] = options["memlimit"]
    if "madvdontneed" in options:
        out["GODEBUG"] = appended(environ.get("GODEBUG", ""), ",", f"madvdontneed={options['madvdontneed']}")
    return out


def variants(peak: int | None) -> tuple[str, ...]:
    """A collector that lets the heap grow half as far, and a memory limit at 3/4 of the baseline's peak."""
    limit = mib_of(MEMLIMIT_SHARE, peak)
    return ("go:gogc=50", *((f"go:memlimit={limit}MiB",) if limit else ()))


SETTINGS = RuntimeSettings(
    runtime="go", prefix="go",
    keys={"gogc": whole(1, 2**31 - 1, also=("off",)),
          "memlimit": pattern(r"[0-9]+(B|KiB|MiB|GiB|TiB)?|off",
                              "a byte count, or with Go's units B, KiB, MiB, GiB, TiB (256MiB), or off"),
          "madvdontneed": one_of("0", "1")},
    env=env, variants=variants,
    notes=("Go reads GOGC, GOMEMLIMIT and GODEBUG when the program starts; a program that calls "
           "debug.SetGCPercent or debug.SetMemoryLimit itself overrides them",))
register_settings(SETTINGS)
