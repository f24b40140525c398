"""memgap's in-process native helpers (C, built at install or on first use)."""
from __future__ import annotations

import os

from memgap.native.build import shared_library

HERE = os.path.dirname(os.path.abspath(__file__))


def library(name: str) -> str:
    """The shared library built from ``name``.c: the install's build, or one built now."""
    return shared_library(os.path.join(HERE, f"{name}.c"), os.path.join(HERE, f"_{name}*.so"),
                          f"memgap-{name}.so", ["-O2", "-shared", "-fPIC"])
