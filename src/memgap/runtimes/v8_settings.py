"""Node's (V8's) own settings as lab variants (``node:max_old_space_size=256``, ``node:semi_space=16``),
given to an unmodified Node program through NODE_OPTIONS, which node reads at start (only a few V8
flags are allowed there: these two are; --gc-interval and --optimize-for-size are refused).

- ``max_old_space_size``: --max-old-space-size, MiB: V8's old generation's ceiling; V8 collects
  harder as it nears it (and the process dies where the live heap does not fit).
- ``semi_space``: --max-semi-space-size, MiB: each of the young generation's two halves (16 on 64-bit
  Node 20 by default); smaller: less young space resident, more scavenges.

NODE_OPTIONS keeps the user's own options, before ours; options on node's command line win over both.
Measured on a Node 20 program that builds 100 MiB of small objects with scratch arrays, drops 90%
and rests 5 s: RSS at rest 237 MiB under the defaults, 216 with semi_space=4, 212 with 1; with
--max-old-space-size=300 235, and with 120 (half its peak RSS) it died (exit 134, heap out of memory).

The V8 heap is the reader ``v8``'s: these settings register under that name, with ``node`` as the
spec's head (what reads NODE_OPTIONS is node).
"""
from __future__ import annotations

from collections.abc import Mapping

from memgap.runtimes import register_settings
from memgap.runtimes.settings import RuntimeSettings, appended, whole


def env(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    flags = []
    if "max_old_space_size" in options:
        flags.append(f"--max-old-space-size={options['max_old_space_size']}")
    if "semi_space" in options:
        flags.append(f"--max-semi-space-size={options['semi_space']}")
    return {"NODE_OPTIONS": appended(environ.get("NODE_OPTIONS", ""), " ", *flags)}


def variants(peak: int | None) -> tuple[str, ...]:
    """Smaller young halves. Not the old space's ceiling: one sized from the baseline's RSS (half its
    peak) ended the measured program (V8's "heap out of memory"): its live heap is not told here."""
    return ("node:semi_space=4",)


SETTINGS = RuntimeSettings(
    runtime="v8", prefix="node",
    keys={"max_old_space_size": whole(16), "semi_space": whole(1, 1024)},
    env=env, variants=variants,
    notes=("node reads NODE_OPTIONS at start; its own command-line options win over it; a live heap over "
           "--max-old-space-size ends the process (FATAL ERROR: ... heap out of memory)",))
register_settings(SETTINGS)
