"""Native scenarios: C programs built on demand with the system compiler.

    path = memgap.scenarios.native.build("blockingpool")

Each prints ``phase: NAME`` lines (for ``--phase-regex 'phase: (\\S+)'``) and,
after ``phase: idle``, waits like a server until it is stopped.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

from ...errors import Unsupported

HERE = os.path.dirname(os.path.abspath(__file__))
PHASE_REGEX = r"phase: (\S+)"


def sources() -> list[str]:
    return sorted(f[:-2] for f in os.listdir(HERE) if f.endswith(".c"))


def build(name: str, out_dir: str | None = None) -> str:
    """Compile scenario ``name`` (once per source version) and return the program's path."""
    src = os.path.join(HERE, f"{name}.c")
    if not os.path.exists(src):
        raise Unsupported(f"no native scenario {name!r} (there are: {', '.join(sources())})")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise Unsupported("no C compiler: install one (Debian: apt-get install gcc) or set CC")
    with open(src, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:12]
    out_dir = out_dir or os.path.join(tempfile.gettempdir(), f"memgap-native-{os.getuid()}")
    os.makedirs(out_dir, exist_ok=True)
    exe = os.path.join(out_dir, f"{name}-{digest}")
    if not os.path.exists(exe):
        tmp = f"{exe}.{os.getpid()}.tmp"
        result = subprocess.run([compiler, "-O2", "-pthread", "-o", tmp, src], capture_output=True, text=True)
        if result.returncode:
            raise Unsupported(f"{compiler} could not build {name}: {result.stderr.strip()[-300:]}")
        os.replace(tmp, exe)  # atomic: a concurrent build never sees a half-written program
    return exe

