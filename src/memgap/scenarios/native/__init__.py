"""Native scenarios: C programs built on demand with the system compiler.

    path = memgap.scenarios.native.build("blockingpool")

Each prints ``phase: NAME`` lines (for ``--phase-regex 'phase: (\\S+)'``) and,
after ``phase: idle``, waits like a server until it is stopped.
"""
from __future__ import annotations

import os

from memgap.errors import Unsupported
from memgap.native.build import compile_c

HERE = os.path.dirname(os.path.abspath(__file__))
PHASE_REGEX = r"phase: (\S+)"


def sources() -> list[str]:
    return sorted(f[:-2] for f in os.listdir(HERE) if f.endswith(".c"))


def build(name: str, out_dir: str | None = None) -> str:
    """Compile scenario ``name`` (once per source version) and return the program's path."""
    src = os.path.join(HERE, f"{name}.c")
    if not os.path.exists(src):
        raise Unsupported(f"no native scenario {name!r} (there are: {', '.join(sources())})")
    return compile_c(src, name, ["-O2", "-pthread"], out_dir)

