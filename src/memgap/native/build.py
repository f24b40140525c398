"""Compile memgap's C sources (native scenarios, the agent) with the system compiler.

Outputs are cached by the source's hash in a folder private to the user, since a
library found there may be preloaded into programs: the folder must be ours
and closed to others, or memgap refuses to use it.
"""
from __future__ import annotations

import os
import shutil

from memgap.errors import ToolMissing, Unsupported
from memgap.sources.private import private_folder


def cache_dir() -> str:
    """``$TMPDIR/memgap-native-UID``, created mode 0700 and checked to be ours."""
    return private_folder("native")


def compiler() -> str:
    """The C compiler ($CC, cc or gcc); ToolMissing when there is none."""
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if found is None:
        raise ToolMissing("a C compiler (cc)", "memgap's native code", "apt-get install gcc, or set CC")
    return found


def compile_c(src: str, name: str, flags: list[str], out_dir: str | None = None) -> str:
    """Compile ``src`` with ``flags`` (once per source version) and return the output's path."""
    # here, not at the top: a snapshot taken in a program finds the install's build, and these modules
    # (hashlib's libcrypto, 3 MiB of file pages) would load into the program for nothing
    import hashlib
    import subprocess

    with open(src, "rb") as fh:
        digest = hashlib.sha256(fh.read() + " ".join(flags).encode()).hexdigest()[:12]
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    else:
        out_dir = cache_dir()
    out = os.path.join(out_dir, f"{name}-{digest}")
    if not os.path.exists(out):
        cc = compiler()
        tmp = f"{out}.{os.getpid()}.tmp"
        result = subprocess.run([cc, *flags, "-o", tmp, src], capture_output=True, text=True)
        if result.returncode:
            raise Unsupported(f"{cc} could not build {os.path.basename(src)}: {result.stderr.strip()[-300:]}")
        os.replace(tmp, out)  # atomic: a concurrent build never sees a half-written file
    return out
