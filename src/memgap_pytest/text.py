"""The pytest plugin's words: a failure's message and the summary's lines (rendering only)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memgap_pytest.readings import Growth

MiB = 1 << 20
# the summary calls a test's RSS "allocator retention" when it grew at least this much, and
# the allocators' free memory grew by at least half of it
RETENTION_FLOOR = 1 << 20


def mib(n: int | None) -> str:
    return "?" if n is None else f"{n / MiB:.2f}"


@dataclass
class Outcome:
    """One measured test, as the summary needs it (and as an xdist worker sends it)."""

    nodeid: str
    grew: Growth
    limit: int | None
    on: str           # "live" or "rss": what the limit applies to
    failed: bool

    def to_dict(self) -> dict[str, object]:
        return {"nodeid": self.nodeid, "grew": self.grew.to_dict(), "limit": self.limit, "on": self.on,
                "failed": self.failed}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Outcome:
        grew, limit = d.get("grew"), d.get("limit")
        return cls(str(d.get("nodeid")), Growth.from_dict(grew if isinstance(grew, dict) else {}),
                   limit if isinstance(limit, int) else None, str(d.get("on")), bool(d.get("failed")))


def is_retention(g: Growth) -> bool:
    """RSS grew and the allocators hold most of it free: not the test's objects."""
    return g.rss >= RETENTION_FLOOR and g.kept_free >= g.rss / 2 and g.live < g.rss / 2


def _layers(g: Growth) -> list[tuple[str, int | None, str]]:
    return [
        ("Python objects (pymalloc's blocks in use)", g.py_objects, ""),
        ("C allocator in use (glibc: large objects, C data)", g.c_in_use, ""),
        ("live: the two above", g.live, ""),
        ("C allocator free (glibc's free chunks)", g.c_free, "a trim gives back at most this"),
        ("pymalloc free (free blocks in its arenas)", g.pymalloc_free, ""),
        ("RSS", g.rss, ""),
    ]


def _arenas(g: Growth) -> str:
    parts = [f"{'main' if nr == 0 else f'thread arena {nr}'} {mib(used)} in use, {mib(free)} free"
             for nr, used, free in g.arenas if abs(used) >= MiB or abs(free) >= MiB]
    if g.mmapped and abs(g.mmapped) >= MiB:
        parts.append(f"mmapped chunks {mib(g.mmapped)}")
    if g.pymalloc_arenas:
        parts.append(f"pymalloc arenas {g.pymalloc_arenas:+d}")
    return "; ".join(parts) if parts else "none by 1 MiB or more"


def failure(g: Growth, limit: int, on: str, warmup: int, second: Growth | None,
            types: list[tuple[str, int, int]] | None, why_not: str = "") -> str:
    """The message of a test over its limit: what grew, layer by layer, where, and which types."""
    what = "live bytes (Python objects + C allocator in use)" if on == "live" else "RSS"
    figure = g.live if on == "live" else g.rss
    head = (f"memgap: the test's {what} grew {mib(figure)} MiB, over its limit of {mib(limit)} MiB "
            f"(read when its fixtures were set up and when its call ended"
            + (f", after {warmup} warm-up run{'s' * (warmup != 1)}" if warmup else "") + ").")
    lines = [head, "  what grew (MiB):"]
    lines += [f"    {name:52}{mib(value):>9}" + (f"  ({note})" if note else "") for name, value, note in _layers(g)]
    lines.append(f"  arenas that grew (MiB): {_arenas(g)}")
    if is_retention(g):
        lines.append("  most of it is allocator retention: memory freed but kept by the allocator, not objects")
    if types is not None and second is not None:
        lines.append(f"  a second run, with fresh fixtures, grew {mib(second.live)} MiB live and "
                     f"{mib(second.rss)} MiB RSS; the Python types that grew in it (objects the collector "
                     "tracks and what they hold):")
        lines += [f"    {name:40}{count:+10d} objects {mib(size):>9} MiB" for name, count, size in types]
        if not types:
            lines.append("    none (what the first run kept, it kept once: a cache? a marker's warmup=1 runs it first)")
    elif why_not:
        lines.append(f"  Python types not named: {why_not}")
    return "\n".join(lines)


def summary(outcomes: Iterable[Outcome], notes: Iterable[str], top: int = 10) -> list[str]:
    """The summary's lines: the tests whose live bytes or RSS grew most."""
    ranked = sorted(outcomes, key=lambda o: -max(o.grew.live, o.grew.rss))
    lines = ["live = Python objects + C allocator in use; kept free = what the allocators hold free "
             "that they did not before", f"{'live MiB':>10}{'RSS MiB':>10}{'kept free':>10}  test"]
    for o in ranked[:top]:
        g = o.grew
        tail = f"  (limit {mib(o.limit)} MiB on {o.on}{': failed' if o.failed else ''})" if o.limit is not None else ""
        tail += "  allocator retention" if is_retention(g) else ""
        lines.append(f"{mib(g.live):>10}{mib(g.rss):>10}{mib(g.kept_free):>10}  {o.nodeid}{tail}")
    lines += [f"note: {n}" for n in sorted(set(notes)) if n]
    return lines
