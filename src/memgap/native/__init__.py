"""memgap's in-process native helpers (C, built at install or on first use)."""
from __future__ import annotations

import glob
import os

from ..native_build import compile_c

HERE = os.path.dirname(os.path.abspath(__file__))


def library(name: str) -> str:
    """The shared library built from ``name``.c: the install's build, or one built now."""
    source = os.path.join(HERE, f"{name}.c")
    built = sorted(glob.glob(os.path.join(HERE, f"_{name}*.so")))
    installed = os.path.basename(os.path.dirname(os.path.dirname(HERE))) in ("site-packages", "dist-packages")
    if built and (installed or os.path.getmtime(built[0]) >= os.path.getmtime(source)):
        return built[0]
    return compile_c(source, f"memgap-{name}.so", ["-O2", "-shared", "-fPIC"])
