"""The JVM's own settings as lab variants (``jvm:maxheapfreeratio=30,minheapfreeratio=10``,
``jvm:periodic_gc_ms=1000``, ``jvm:gc=serial``, ``jvm:xmx=256m``), given to an unmodified Java
program through JAVA_TOOL_OPTIONS, which every HotSpot JVM reads at start (and says so on stderr:
"Picked up JAVA_TOOL_OPTIONS"). Options on the program's own command line come after it and win.

- ``maxheapfreeratio`` / ``minheapfreeratio``: -XX:MaxHeapFreeRatio / -XX:MinHeapFreeRatio (70 and
  40 by default): after a full collection (and, with G1, at the end of a concurrent cycle) the heap
  shrinks until at most MAX% of it is free. The JVM refuses to start with MaxHeapFreeRatio below
  MinHeapFreeRatio, so a MAX below the default 40 needs a MIN too: the spec is refused otherwise.
- ``periodic_gc_ms``: -XX:G1PeriodicGCInterval (G1, JDK 12+): a concurrent cycle after that long
  without a collection, so an idle JVM gives its free heap back without a System.gc().
- ``gc``: the collector: serial (-XX:+UseSerialGC, a smaller heap on few cores), parallel, g1.
- ``xms``, ``xmx``: the heap's initial and largest size (-Xms, -Xmx; 256m, 1g). Without -Xms the JVM
  starts at 1/64 of the machine's memory, and the serial and parallel collectors do not shrink below it.

JAVA_TOOL_OPTIONS keeps the user's own options, before ours (a later option wins).

Measured on a program that builds a 200 MiB cache with 4x as much scratch, drops 90% of it and rests
(tests/programs/rtlab/GrowDrop.java; OpenJDK 17 G1, 2 cores, 24 GiB): with one System.gc() RSS at rest
was 142 MiB under the defaults, 80 with MaxHeapFreeRatio=30,MinHeapFreeRatio=10, 68 with 10 and 5, 113
with -Xmx256m, 330 with the serial collector (a heap that never grew past 310 MiB, not shrunk after
one full collection); without the System.gc(), 666 under the defaults, 250 with
G1PeriodicGCInterval=500, 310 with the serial collector and -Xms16m.
"""
from __future__ import annotations

from collections.abc import Mapping

from memgap.runtimes import register_settings
from memgap.runtimes.settings import RuntimeSettings, appended, one_of, pattern, whole

DEFAULT_MIN_FREE, DEFAULT_MAX_FREE = 40, 70  # HotSpot's MinHeapFreeRatio and MaxHeapFreeRatio
COLLECTORS = {"serial": "-XX:+UseSerialGC", "parallel": "-XX:+UseParallelGC", "g1": "-XX:+UseG1GC"}
SIZE = pattern(r"[0-9]+[kKmMgG]?", "a size as the JVM reads it: bytes, or with k, m or g (256m)")


def env(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    flags = []
    if "gc" in options:
        flags.append(COLLECTORS[options["gc"]])
    for key, flag in (("xms", "-Xms"), ("xmx", "-Xmx")):
        if key in options:
            flags.append(flag + options[key])
    for key, flag in (("minheapfreeratio", "MinHeapFreeRatio"), ("maxheapfreeratio", "MaxHeapFreeRatio"),
                      ("periodic_gc_ms", "G1PeriodicGCInterval")):
        if key in options:
            flags.append(f"-XX:{flag}={options[key]}")
    return {"JAVA_TOOL_OPTIONS": appended(environ.get("JAVA_TOOL_OPTIONS", ""), " ", *flags)}


def check_all(options: Mapping[str, str]) -> str:
    high = int(options.get("maxheapfreeratio", DEFAULT_MAX_FREE))
    low = int(options.get("minheapfreeratio", DEFAULT_MIN_FREE))
    if low > high:
        if "minheapfreeratio" not in options:
            fix = f"add minheapfreeratio=N with N at most {high} (the JVM's default is {DEFAULT_MIN_FREE})"
        elif "maxheapfreeratio" not in options:
            fix = f"add maxheapfreeratio=N with N at least {low} (the JVM's default is {DEFAULT_MAX_FREE})"
        else:
            fix = "make minheapfreeratio at most maxheapfreeratio"
        return f"the JVM refuses to start with MaxHeapFreeRatio {high} below MinHeapFreeRatio {low}: {fix}"
    if "periodic_gc_ms" in options and options.get("gc", "g1") != "g1":
        return "periodic_gc_ms is G1's (G1PeriodicGCInterval): not with gc=" + options["gc"]
    return ""


def variants(peak: int | None) -> tuple[str, ...]:
    """A heap that keeps at most 30% free after a collection, the same with a collection after 1 s
    without one (an idle JVM), and the serial collector from a small initial heap."""
    return ("jvm:maxheapfreeratio=30,minheapfreeratio=10",
            "jvm:periodic_gc_ms=1000,maxheapfreeratio=30,minheapfreeratio=10",
            "jvm:gc=serial,xms=16m")


SETTINGS = RuntimeSettings(
    runtime="jvm", prefix="jvm",
    keys={"maxheapfreeratio": whole(0, 100), "minheapfreeratio": whole(0, 100),
          "periodic_gc_ms": whole(1), "gc": one_of(*COLLECTORS), "xms": SIZE, "xmx": SIZE},
    env=env, variants=variants, check_all=check_all,
    notes=("the JVM reads JAVA_TOOL_OPTIONS at start and prints 'Picked up JAVA_TOOL_OPTIONS' on stderr; an "
           "option on the java command line itself comes after it and wins",))
register_settings(SETTINGS)
