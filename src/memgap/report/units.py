"""Byte formatting shared by every renderer."""
from __future__ import annotations

MiB = 1 << 20


def mib(n: int | float | None, digits: int = 1) -> str:
    """``n`` bytes as MiB text; '-' for an unmeasured figure."""
    if n is None:
        return "-"
    return f"{n / MiB:.{digits}f}"


def pct(part: int | float, whole: int | float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "-"
