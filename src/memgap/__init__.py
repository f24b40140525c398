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

from .api import TrimResult, explain, metric, phase, phases, snapshot, trim
from .errors import AccessDenied, MalformedInput, MemgapError, NoSuchProcess, Unsupported
from .model import Finding, Layer, Snapshot
from .pymalloc_release import PoolRelease, release_pymalloc
from .remedies import Trimmer, preload_env, spawn_env, verify_env

__version__ = "0.1.0"

__all__ = [
    "snapshot", "phase", "phases", "trim", "explain", "metric", "TrimResult",
    "Trimmer", "spawn_env", "preload_env", "verify_env", "release_pymalloc", "PoolRelease",
    "Snapshot", "Layer", "Finding",
    "MemgapError", "NoSuchProcess", "AccessDenied", "Unsupported", "MalformedInput",
]
