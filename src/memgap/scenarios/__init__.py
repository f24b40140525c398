"""Runnable reproductions of the field reports in ``seeds/``.

Each scenario is a module run as ``python -m memgap.scenarios.<name> [--flags]``.
It prints one ``memgap-phase: <name> rss_kib=<N>`` line per phase (and calls
``memgap.phase(name)`` when the core provides it), so a lab can follow it from
outside and a recorder can snapshot it from inside.

This module is the registry only: it must stay cheap to import (no numpy, no
scenario module imports), because the lab, the CLI and the tests read it to
build command lines.

Every knob is a ``--flag`` (dashes or underscores) and an environment variable
``MEMGAP_<KNOB>``; a flag wins over the environment, which wins over the default.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KnobValue = int | float | str
#: knob name -> (environment variable, default, one-line help)
KnobSpec = tuple[str, KnobValue, str]

__all__ = [
    "KnobSpec",
    "KnobValue",
    "SCENARIOS",
    "ScenarioInfo",
    "env_var",
    "flag",
    "scenario_command",
]


def env_var(knob: str) -> str:
    """The environment variable that sets ``knob``: ``MEMGAP_<KNOB>``."""
    return "MEMGAP_" + knob.upper()


def flag(knob: str) -> str:
    """The command-line flag that sets ``knob``: ``--payload-kib`` for ``payload_kib``."""
    return "--" + knob.replace("_", "-")


def _knobs(*specs: tuple[str, KnobValue, str]) -> dict[str, KnobSpec]:
    return {name: (env_var(name), default, help_) for name, default, help_ in specs}


@dataclass(frozen=True)
class ScenarioInfo:
    """One registered scenario."""

    name: str
    module: str
    seed: str
    summary: str
    knobs: Mapping[str, KnobSpec] = field(default_factory=dict, hash=False)
    #: the phases it marks, in order, at its default knobs (``exit`` excluded:
    #: the core adds it). Informational; knobs such as ``passes`` change it.
    #: For ``multiproc`` these are the distinct names in a typical order: the
    #: parent marks post-import, post-spawn, post-workers, idle; each worker
    #: marks post-import, post-<phase> per phase, idle.
    phases: tuple[str, ...] = ()

    def defaults(self) -> dict[str, KnobValue]:
        return {k: spec[1] for k, spec in self.knobs.items()}


_REST_HELP = "seconds to stay alive, idle, at the end"

SCENARIOS: dict[str, ScenarioInfo] = {
    info.name: info
    for info in (
        ScenarioInfo(
            name="threadpool",
            module="memgap.scenarios.threadpool",
            seed="000",
            summary=(
                "thread pool decoding zlib chunks into numpy temporaries: "
                "glibc per-thread arenas keep the freed buffers"
            ),
            knobs=_knobs(
                ("threads", 32, "worker threads in the decode pool"),
                ("chunks", 256, "chunks decoded per pass"),
                ("passes", 5, "decode passes"),
                ("payload_kib", 256, "decompressed size of one chunk, KiB"),
                ("rest", 0.5, _REST_HELP),
            ),
            phases=("post-import", "post-session")
            + tuple(f"post-pass-{k}" for k in range(1, 6))
            + ("idle",),
        ),
        ScenarioInfo(
            name="asyncburst",
            module="memgap.scenarios.asyncburst",
            seed="001",
            summary=(
                "single-threaded asyncio bursts of concurrent JSON decoding: "
                "the main heap stays fragmented after each burst"
            ),
            knobs=_knobs(
                ("bursts", 3, "bursts of concurrent work"),
                ("concurrency", 6, "coroutines per burst"),
                ("events", 400, "events each coroutine decodes and keeps until the burst ends"),
                ("payload_kib", 8, "size of one JSON event payload, KiB"),
                ("rest", 1.0, "seconds of rest after the last burst, before `idle`"),
                ("keep_small", 0, "1: also keep each stream's cursor and recent ids as small objects, "
                                  "which pin pymalloc arenas (report 002's mechanism)"),
            ),
            phases=("post-import",) + tuple(f"post-burst-{k}" for k in range(1, 4)) + ("idle",),
        ),
        ScenarioInfo(
            name="trie",
            module="memgap.scenarios.trie",
            seed="002",
            summary=(
                "build a trie of small objects, prune most of it: "
                "pymalloc arenas stay while one object lives in them"
            ),
            knobs=_knobs(
                ("words", 200000, "random words inserted into the trie"),
                ("prune_pct", 60, "percent of the words deleted before path compression"),
                ("compress", 1, "1: path-compress single-child chains after deleting; 0: don't"),
                ("rest", 0.5, _REST_HELP),
            ),
            phases=("post-import", "post-build", "post-prune", "idle"),
        ),
        ScenarioInfo(
            name="multiproc",
            module="memgap.scenarios.multiproc",
            seed="003",
            summary=(
                "spawned worker processes allocate and free growing buffers "
                "phase by phase: retention summed across all processes"
            ),
            knobs=_knobs(
                ("procs", 3, "worker processes (spawn start method)"),
                ("phases", 3, "import phases per worker"),
                ("max_mib", 64, "largest working set a worker holds in a phase, MiB"),
                ("rest", 0.5, _REST_HELP + " (workers and parent)"),
            ),
            phases=(
                "post-import",
                "post-spawn",
                "post-import-changesets",
                "post-import-manifests",
                "post-import-files",
                "post-workers",
                "idle",
            ),
        ),
        ScenarioInfo(
            name="blockingpool",
            module="memgap.scenarios.blockingpool",
            seed="004",
            summary=(
                "blocking thread pool serving requests with large payloads: "
                "memory grows with concurrency and payload size"
            ),
            knobs=_knobs(
                ("concurrency", 16, "threads in the blocking pool"),
                ("requests", 2000, "requests served"),
                ("payload_kib", 200, "request payload size, KiB"),
                ("rest", 0.5, _REST_HELP),
            ),
            phases=("post-import", "post-requests", "idle"),
        ),
    )
}


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def scenario_command(name: str, **knobs: Any) -> list[str]:
    """The command line that runs scenario ``name`` with the given knobs.

    Knobs left out are not passed, so the scenario's own resolution applies
    (``MEMGAP_<KNOB>`` from the environment, then the default). Knob names may
    use dashes or underscores. Raises ``KeyError`` for an unknown scenario and
    ``ValueError`` for an unknown knob.
    """
    try:
        info = SCENARIOS[name]
    except KeyError:
        raise KeyError(
            f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}"
        ) from None
    cmd = [sys.executable, "-m", info.module]
    normalized = {k.replace("-", "_"): v for k, v in knobs.items()}
    unknown = sorted(set(normalized) - set(info.knobs))
    if unknown:
        raise ValueError(
            f"scenario {name!r} has no knob(s) {', '.join(unknown)}; "
            f"known: {', '.join(info.knobs)}"
        )
    for knob in info.knobs:  # registry order, so commands are stable
        if knob in normalized and normalized[knob] is not None:
            cmd += [flag(knob), _format_value(normalized[knob])]
    return cmd
