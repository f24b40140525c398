"""The tunables this machine's glibc knows (``ld.so --list-tunables``, glibc 2.33+).

glibc ignores a GLIBC_TUNABLES entry it does not know, silently: a misspelt
tunable would make a lab variant identical to the baseline. The lab checks
names against this list before running anything.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess

_LINE = re.compile(r"^(glibc\.[\w.]+):\s*(\S+)\s*\(min:\s*(\S+),\s*max:\s*(\S+)\)\s*$")


def parse_tunables(text: str) -> dict[str, tuple[int, int]]:
    """``--list-tunables`` output: each tunable's (min, max). Lines of another shape are skipped."""
    found: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            try:
                found[m.group(1)] = (int(m.group(3), 0), int(m.group(4), 0))
            except ValueError:
                continue
    return found


def _dynamic_loader(maps_path: str = "/proc/self/maps") -> str | None:
    """The dynamic loader this (dynamically linked) Python runs under: the machine's glibc's."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if re.match(r"ld-linux[\w.-]*\.so", os.path.basename(path)):
                    return path
    except OSError:
        pass
    return None


@functools.cache
def list_tunables() -> dict[str, tuple[int, int]] | None:
    """This machine's glibc tunables, or None where the loader cannot list them."""
    loader = _dynamic_loader()
    if loader is None:
        return None
    try:
        out = subprocess.run([loader, "--list-tunables"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = parse_tunables(out.stdout) if out.returncode == 0 else {}
    return found or None
