"""Allocator variants: parsing ``--variant`` specs, their libraries found, their environment built
(the allocators themselves, their libraries and option variables: ``allocators``).

Below the lab (which runs the variants) and the remedies (``preload_env`` builds its
environment from one), so that neither has to import the other.

A spec is ``NAME[:key=value,...]``:

- ``glibc`` with glibc's tunables ``arena_max``, ``mmap_threshold``,
  ``trim_threshold``, ``top_pad``, ``mmap_max`` (set through their
  ``MALLOC_*_`` environment variables), or any tunable by its full name
  (``glibc.malloc.tcache_count=0``, set through ``GLIBC_TUNABLES``, after any
  the user has there; checked against the tunables this machine's glibc lists);
- ``jemalloc`` with any ``MALLOC_CONF`` option (``background_thread=true``,
  ``dirty_decay_ms=1000``, ...);
- ``tcmalloc`` and ``mimalloc`` with their ``TCMALLOC_*`` / ``MIMALLOC_*``
  environment options (``release_rate=10`` -> ``TCMALLOC_RELEASE_RATE=10``);
- on glibc, ``trim=idle`` (one ``malloc_trim(0)`` after the phase named idle),
  ``trim=quiet`` (memgap's idle trimmer: a trim once the program has been quiet
  for 2 s after a burst; measured after the program's rest) or
  ``trim=every:SECONDS`` (a periodic trim), injected without changing the
  program: through memgap's bootstrap in Python, its native agent elsewhere;
  ``pymalloc=off`` (``PYTHONMALLOC=malloc``), and ``pymalloc=release`` (the
  variant's trims also give back the pages of pymalloc's empty pools);
- with any allocator, ``gc=freeze-at-fork`` for a Python program that forks workers
  (the recipe of gc.freeze's documentation, through memgap's bootstrap: collections
  off in the parent, ``gc.freeze()`` right before each fork, back on in the child, so
  the child's collections do not write into, and copy, the pages it shares).

A runtime's own settings are a part of their own, with the runtime's head: ``go:gogc=50``,
``jvm:maxheapfreeratio=30,minheapfreeratio=10``, ``node:semi_space=4`` (what each takes is its
settings module's: memgap.runtimes.settings; they come from the runtimes' registry, never named
here). Parts join with ``+``: ``jvm:gc=serial+glibc:arena_max=2`` sets both; a variant with no
allocator part keeps glibc's malloc as it is.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from memgap.allocators.catalog import (
    ALLOCATORS,
    CATALOGUE,
    GLIBC_TUNABLES,
    PRELOADABLE,
    TUNABLE_PREFIX,
    find_library,
    install_hint,
    option_env,
    preloaded,
)
from memgap.errors import UsageError
from memgap.record.envnames import (
    GC_FREEZE_ENV,
    PYMALLOC_RELEASE_ENV,
    TRIM_AFTER_ENV,
    TRIM_EVERY_ENV,
    TRIMMER_ENV,
)

# What a remedy costs to apply, cheapest first: the lab prefers the cheapest that works.
COST_ENV, COST_TRIMMER, COST_PRELOAD = 0, 1, 2
# seconds without a change in glibc's bytes in use before memgap's idle trimmer trims (memgap.remedies.Trimmer
# and the agent's trimmer in src/memgap/agent/agent.c): how long a quiet spell MEMGAP_TRIMMER=1 waits for
TRIMMER_QUIET = 2.0
COST_WORDS = {COST_ENV: "environment only",
              COST_TRIMMER: "memgap in the process (a trimmer, or the collector frozen at fork)",
              COST_PRELOAD: "another allocator preloaded"}

DEFAULT_SPECS = (
    "glibc",
    "glibc:arena_max=2",
    "glibc:mmap_threshold=131072",
    "glibc:trim_threshold=65536",
    "glibc:trim=idle",
    "glibc:trim=idle,pymalloc=release",
    "glibc:trim=every:1",
    "glibc:arena_max=2,trim=idle",
    "glibc:arena_max=2,trim=quiet",
    "jemalloc",
    "jemalloc:dirty_decay_ms=1000",
    "jemalloc:background_thread=true,dirty_decay_ms=1000",
    "tcmalloc",
    "mimalloc",
    "glibc:pymalloc=off",
)


@dataclass
class Variant:
    """One way to run the workload: an allocator and its settings."""

    spec: str
    allocator: str
    options: dict[str, str] = field(default_factory=dict)
    trim: str = ""             # "", "idle", "quiet" or "every:SECONDS"
    pymalloc_off: bool = False
    pymalloc_release: bool = False  # the variant's trims also give back pymalloc's empty pools
    gc_freeze: bool = False    # gc=freeze-at-fork: a forking Python program's children copy fewer pages
    library: str = ""          # the preloaded allocator's path, once found
    runtime: dict[str, dict[str, str]] = field(default_factory=dict)  # a runtime's head -> its settings

    @property
    def cost(self) -> int:
        if self.allocator != "glibc":
            return COST_PRELOAD
        return COST_TRIMMER if self.trim or self.gc_freeze else COST_ENV

    @property
    def settings(self) -> int:
        """How many things a user must change to apply it (a tie-break between equal costs)."""
        return (len(self.options) + bool(self.trim) + self.pymalloc_off + self.pymalloc_release + self.gc_freeze
                + (self.allocator != "glibc") + sum(len(options) for options in self.runtime.values()))

    @property
    def is_baseline(self) -> bool:
        return self.allocator == "glibc" and not (self.options or self.trim or self.python_only or self.runtime)

    @property
    def preloads(self) -> bool:
        """It preloads another allocator in place of glibc's malloc."""
        return self.allocator != "glibc"

    @property
    def sets_malloc(self) -> bool:
        """It changes malloc itself: another allocator, glibc's tunables, or its trims."""
        return self.allocator != "glibc" or bool(self.options or self.trim)

    @property
    def device_memory(self) -> bool:
        """It sets what holds a GPU's memory (a framework's device cache): it changes device memory, not RSS."""
        from memgap.runtimes import runtime_settings

        return any(getattr(runtime_settings(head), "device", False) for head in self.runtime)

    @property
    def python_only(self) -> bool:
        """It sets something only a Python interpreter reads (pymalloc, the collector)."""
        return self.pymalloc_off or self.pymalloc_release or self.gc_freeze

    @property
    def quiet_delay(self) -> float:
        """Seconds of quiet the variant waits for before it acts, as deployed (0: it does not wait):
        memgap's idle trimmer, which trim=quiet measures and trim=idle's lines deploy."""
        return TRIMMER_QUIET if self.trim in ("quiet", "idle") else 0.0

    @property
    def quiet_what(self) -> str:
        """What waits, in words (for a variant with a ``quiet_delay``)."""
        return ("memgap's idle trimmer, MEMGAP_TRIMMER=1" if self.trim == "quiet" else
                "measured as one trim at idle; its lines deploy memgap's idle trimmer, MEMGAP_TRIMMER=1")

    @property
    def arena_max(self) -> int:
        """The arena cap this variant sets (either form), 0 for none."""
        return int(self.options.get("arena_max") or self.options.get(TUNABLE_PREFIX + "malloc.arena_max") or 0)

    def env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment that applies this variant to an unmodified process, over ``environ``
        (the one it would have otherwise: os.environ where not given).

        LD_PRELOAD keeps a preload the user already has, after the allocator;
        GLIBC_TUNABLES keeps the user's tunables, before the variant's (a later
        entry wins); so do a runtime's variables (GODEBUG, JAVA_TOOL_OPTIONS, NODE_OPTIONS).
        """
        environ = os.environ if environ is None else environ
        env = option_env(self.allocator, self.options, environ.get("GLIBC_TUNABLES", ""))
        if self.library:
            env["LD_PRELOAD"] = preloaded(self.library, environ.get("LD_PRELOAD", ""))
        if self.runtime:
            from memgap.runtimes import runtime_settings

            for head, options in self.runtime.items():
                settings = runtime_settings(head)
                assert settings is not None  # parse_variant took only registered heads
                env.update(settings.env(options, environ))
        if self.trim == "idle":
            env[TRIM_AFTER_ENV] = "idle"
        elif self.trim == "quiet":
            env[TRIMMER_ENV] = "1"
        elif self.trim.startswith("every:"):
            env[TRIM_EVERY_ENV] = self.trim.split(":", 1)[1]
        if self.pymalloc_release:
            env[PYMALLOC_RELEASE_ENV] = "1"
        if self.pymalloc_off:
            env["PYTHONMALLOC"] = "malloc"
        if self.gc_freeze:
            env[GC_FREEZE_ENV] = "1"
        return env


def parse_variant(spec: str) -> Variant:
    """Parse ``PART[+PART...]``, each ``NAME[:key=value,...]``: at most one allocator, and a
    runtime's settings (raises UsageError with what is wrong)."""
    spec = spec.strip()
    parts = [part.strip() for part in spec.split("+")]
    allocator_parts = [p for p in parts if p.partition(":")[0] in ALLOCATORS]
    if len(allocator_parts) > 1:
        raise UsageError(f"variant {spec!r}: one allocator per variant, not {len(allocator_parts)}")
    variant = Variant(spec, "glibc")
    if allocator_parts:
        _parse_allocator(spec, allocator_parts[0], variant)
    for part in parts:
        if part not in allocator_parts:
            _parse_runtime(spec, part, variant)
    return variant


def _parse_runtime(spec: str, part: str, variant: Variant) -> None:
    """A runtime's part (``go:gogc=50``): its head registered, its settings checked by its module."""
    from memgap.runtimes import runtime_settings, settings_prefixes
    from memgap.runtimes.settings import check

    head, _, rest = part.partition(":")
    settings = runtime_settings(head)
    if settings is None:
        raise UsageError(f"variant {spec!r}: unknown allocator, runtime or library {head!r} (choose from "
                         f"{', '.join((*ALLOCATORS, *settings_prefixes()))})")
    if head in variant.runtime:
        raise UsageError(f"variant {spec!r}: {head} named twice")
    options = {}
    for item in filter(None, (i.strip() for i in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise UsageError(f"variant {spec!r}: {item!r} is not key=value")
        options[key] = value
    wrong = check(settings, spec, options)
    if wrong:
        raise UsageError(wrong)
    variant.runtime[head] = options


def _parse_allocator(spec: str, part: str, variant: Variant) -> None:
    """An allocator's part (``glibc:arena_max=2,trim=idle``) into ``variant``."""
    name, _, rest = part.partition(":")
    variant.allocator = name
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise UsageError(f"variant {spec!r}: {item!r} is not key=value")
        if key == "trim":
            if value not in ("idle", "quiet") and not (value.startswith("every:") and _positive(value[6:])):
                raise UsageError(f"variant {spec!r}: trim is 'idle', 'quiet' or 'every:SECONDS', not {value!r}")
            if name != "glibc":
                raise UsageError(f"variant {spec!r}: trim applies to glibc only")
            variant.trim = value
        elif key == "gc":
            if value != "freeze-at-fork":
                raise UsageError(f"variant {spec!r}: gc is 'freeze-at-fork', not {value!r}")
            variant.gc_freeze = True
        elif key == "pymalloc":
            if value not in ("off", "on", "release"):
                raise UsageError(f"variant {spec!r}: pymalloc is 'off', 'on' or 'release'")
            variant.pymalloc_off = value == "off"
            variant.pymalloc_release = value == "release"
        elif name == "glibc":
            if key not in GLIBC_TUNABLES and not key.startswith(TUNABLE_PREFIX):
                raise UsageError(f"variant {spec!r}: glibc has no tunable {key!r} (choose from "
                                 f"{', '.join(GLIBC_TUNABLES)}, or name one in full: glibc.malloc.tcache_count)")
            if not (value.isascii() and value.isdigit()):
                raise UsageError(f"variant {spec!r}: {key} must be a whole number of bytes or arenas")
            variant.options[key] = value
        else:
            variant.options[key] = value
    if variant.pymalloc_release and not variant.trim:
        raise UsageError(f"variant {spec!r}: pymalloc=release acts in the variant's trims: add trim=idle, "
                         "trim=quiet or trim=every:SECONDS")


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def check_tunables(variants: list[Variant]) -> None:
    """Raise UsageError for a full tunable name this machine's glibc does not list, or a
    value outside its range (glibc would ignore either without a word)."""
    from memgap.sources.glibc_tunables import list_tunables

    wanted = [(v, k, val) for v in variants for k, val in v.options.items() if k.startswith(TUNABLE_PREFIX)]
    known = list_tunables() if wanted else None
    if known is None:
        return  # none named in full, or this loader cannot list them (glibc < 2.33)
    for v, key, value in wanted:
        if key not in known:
            close = sorted(k for k in known if k.startswith(key.rsplit(".", 1)[0] + "."))
            raise UsageError(f"variant {v.spec!r}: this machine's glibc has no tunable {key!r}"
                             + (f" (it has {', '.join(close)})" if close else ""))
        low, high = known[key]
        if not low <= int(value) <= high:
            raise UsageError(f"variant {v.spec!r}: {key}={value} is outside glibc's range [{low}, {high}]")


def resolve(variants: list[Variant]) -> tuple[list[Variant], list[str]]:
    """Variants that can run here (libraries found), and a line for each skipped one.

    Raises UsageError for a tunable this machine's glibc does not know."""
    check_tunables(variants)
    ready, skipped = [], []
    for v in variants:
        if v.allocator in PRELOADABLE:
            path = find_library(v.allocator)
            if path is None:
                skipped.append(f"{v.spec}: {CATALOGUE[v.allocator].library} not found; install it with "
                               f"`{install_hint(v.allocator)}`")
                continue
            v.library = path
        ready.append(v)
    return ready, skipped
