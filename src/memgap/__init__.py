"""memgap: explain where a process's resident memory went, and what brings it back.

In-process API::

    import memgap
    snap = memgap.snapshot()           # layers that add up to RSS
    with memgap.phase("post-pass-1"):  # or memgap.phase("idle") as a plain call
        ...
    released = memgap.trim()           # malloc_trim(0), measured
    memgap.release_pymalloc()          # the pages of pymalloc's empty pools
    print(memgap.explain())
"""
from __future__ import annotations

import importlib

from memgap.documents.display import register_html as _register_html

TYPE_CHECKING = False  # typing's own, without importing typing: `memgap --help` needs none of it (5-9 ms)

if TYPE_CHECKING:
    from typing import Any

    from memgap.api import TrimResult, explain, metric, phase, phases, snapshot, trim
    from memgap.documents.records import LabDocument
    from memgap.documents.snapshot import Finding, Layer, Snapshot
    from memgap.errors import AccessDenied, MalformedInput, MemgapError, NoSuchProcess, Unsupported
    from memgap.inside.pymalloc_release import PoolRelease, release_pymalloc
    from memgap.remedies import Trimmer, preload_env, spawn_env, verify_env

__version__ = "0.1.0"

# Each name is imported on first use: `python -m memgap`, the bootstrap of a recorded program and
# the pytest plugin import this package, and most of them need little of it (measured: importing
# all of it took 160 ms of CPU, paid by every command and every program the lab runs).
_WHERE = {
    **dict.fromkeys(("TrimResult", "explain", "metric", "phase", "phases", "snapshot", "trim"), ".api"),
    **dict.fromkeys(("AccessDenied", "MalformedInput", "MemgapError", "NoSuchProcess", "Unsupported"), ".errors"),
    **dict.fromkeys(("Finding", "Layer", "Snapshot"), ".documents.snapshot"),
    **dict.fromkeys(("PoolRelease", "release_pymalloc"), ".inside.pymalloc_release"),
    **dict.fromkeys(("Trimmer", "preload_env", "spawn_env", "verify_env"), ".remedies"),
}


def _snapshot_html(snap: Snapshot) -> str:
    from memgap.report.snapshot_html import snapshot_fragment  # rich and the renderers only when shown

    return snapshot_fragment(snap)


def _lab_html(lab: LabDocument) -> str:
    from memgap.report.html import lab_fragment

    return lab_fragment(lab)


# A document shows itself in a notebook through these: the documents import no renderer, and this
# package runs before any of their modules, whichever a user imports first.
_register_html("snapshot", _snapshot_html)
_register_html("lab", _lab_html)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'memgap' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

__all__ = [
    "snapshot", "phase", "phases", "trim", "explain", "metric", "TrimResult",
    "Trimmer", "spawn_env", "preload_env", "verify_env", "release_pymalloc", "PoolRelease",
    "Snapshot", "Layer", "Finding",
    "MemgapError", "NoSuchProcess", "AccessDenied", "Unsupported", "MalformedInput",
]
