"""memgap's native libraries as a caller gets them: the install's build where it is current, else built
now by memgap.native.build (loaded only then: a look that walks glibc's heaps takes the install's)."""
from __future__ import annotations

import glob
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def built_library(source: str, built_pattern: str) -> str | None:
    """The library the install built from ``source`` (files matching ``built_pattern``), or None.

    In a source checkout a build older than its source is not used: the source changed since.
    """
    built = sorted(glob.glob(built_pattern))
    folder = os.path.dirname(os.path.abspath(source))
    installed = os.path.basename(os.path.dirname(os.path.dirname(folder))) in ("site-packages", "dist-packages")
    if built and (installed or os.path.getmtime(built[0]) >= os.path.getmtime(source)):
        return built[0]
    return None


def shared_library(source: str, built_pattern: str, name: str, flags: list[str]) -> str:
    """The library the install built (files matching ``built_pattern``), or ``source`` compiled now.
    Raises ToolMissing when it has to be built and there is no C compiler."""
    found = built_library(source, built_pattern)
    if found is not None:
        return found
    from memgap.native.build import compile_c

    return compile_c(source, name, flags)


def library(name: str) -> str:
    """The shared library built from ``name``.c beside this module: the install's build, or one built now."""
    return shared_library(os.path.join(HERE, f"{name}.c"), os.path.join(HERE, f"_{name}*.so"),
                          f"memgap-{name}.so", ["-O2", "-shared", "-fPIC"])
