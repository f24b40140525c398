"""Helpers shared by the scenarios: knobs, phase marks, the idle tail.

Kept free of heavy imports (no numpy) so it does not move a scenario's
post-import baseline.

Output contract (stdout, one line each, flushed):

- ``memgap-scenario: <name> pid=<pid> <knob>=<value> ...`` once, at start-up,
  with the knob values in force;
- ``memgap-phase: <phase> rss_kib=<VmRSS>`` at every phase mark;
- ``memgap-result: <name> <key>=<value> ...`` at most once, a small summary
  (what actually ran: threads alive, nodes removed, ...).
"""
from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memgap.scenarios import SCENARIOS, KnobValue, ScenarioInfo, flag

__all__ = [
    "PHASE_NAME",
    "idle",
    "mark",
    "parse_knobs",
    "result",
    "rss_kib",
]

#: phase names: lowercase words joined by dashes ("post-pass-3")
PHASE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*\Z")

_UNRESOLVED = object()
_phase_fn: Any = _UNRESOLVED


# --------------------------------------------------------------------- knobs

def _converter(default: KnobValue) -> Callable[[str], KnobValue]:
    if isinstance(default, bool):  # before int: bool is an int
        def to_bool(text: str) -> KnobValue:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {text!r}")
        return to_bool
    if isinstance(default, int):
        return lambda text: int(text.strip(), 10)
    if isinstance(default, float):
        return lambda text: float(text.strip())
    return str


def parse_knobs(
    scenario: str,
    argv: Sequence[str] | None = None,
    *,
    bounds: Mapping[str, tuple[float | None, float | None]] | None = None,
    environ: Mapping[str, str] | None = None,
    announce: bool = True,
) -> argparse.Namespace:
    """Resolve the knobs of ``scenario``: ``--flag``, then ``MEMGAP_<KNOB>``, then default.

    ``bounds`` maps a knob to an inclusive ``(low, high)`` range (either may be
    None); numeric knobs without one must be at least 1 (int) or 0 (float).
    A bad flag or environment value exits with status 2 and a message naming it.
    With ``announce``, prints the ``memgap-scenario:`` line.
    """
    info = SCENARIOS[scenario]
    env = os.environ if environ is None else environ
    parser = _knob_parser(info)
    args = parser.parse_args(argv)
    for knob, (var, default, _help) in info.knobs.items():
        value, source = _resolve(parser, getattr(args, knob), var, default, env)
        _check_range(parser, knob, value, source, (bounds or {}).get(knob, (1 if isinstance(default, int) else 0,
                                                                              None)))
        setattr(args, knob, value)
    if announce:
        knobs = " ".join(f"{k}={getattr(args, k)}" for k in info.knobs)
        _emit(f"memgap-scenario: {scenario} pid={os.getpid()} {knobs}")
    return args


def _knob_parser(info: ScenarioInfo) -> argparse.ArgumentParser:
    """A flag per knob (``--payload-kib``, and ``--payload_kib`` too), none with a default:
    a flag left out falls through to the environment."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {info.module}",
        description=f"{info.summary} (seed {info.seed}). Every knob can also be set "
        "through its MEMGAP_<KNOB> environment variable; a flag wins.",
    )
    for knob, (var, default, help_) in info.knobs.items():
        names = [flag(knob)] + (["--" + knob] if "_" in knob else [])
        parser.add_argument(*names, dest=knob, type=_converter(default), default=None,
                            metavar=type(default).__name__.upper(), help=f"{help_} (env {var}, default {default})")
    return parser


def _resolve(parser: argparse.ArgumentParser, value: KnobValue | None, var: str, default: KnobValue,
             env: Mapping[str, str]) -> tuple[KnobValue, str]:
    """A knob's value and where it came from: its flag, its environment variable, or the default."""
    if value is not None:
        return value, "flag"
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        return default, "default"
    try:
        return _converter(default)(raw), var
    except ValueError:
        parser.error(f"{var}={raw!r}: expected {type(default).__name__}")


def _check_range(parser: argparse.ArgumentParser, knob: str, value: KnobValue, source: str,
                 bound: tuple[float | None, float | None]) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = bound
    if (low is not None and value < low) or (high is not None and value > high):
        where = f"default {value}" if source == "default" else f"{flag(knob) if source == 'flag' else source}={value}"
        parser.error(f"{knob}: {where} is out of range [{'' if low is None else low}, {'' if high is None else high}]")


# --------------------------------------------------------------------- marks

def rss_kib() -> int:
    """VmRSS of this process in KiB, from /proc/self/status (-1 if unreadable)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def _resolve_phase() -> Any:
    global _phase_fn
    if _phase_fn is _UNRESOLVED:
        if not os.environ.get("MEMGAP_RECORD_DIR"):
            _phase_fn = None  # not recorded (no `memgap run`): a plain run stays unobserved
            return None
        try:
            import memgap  # the core; it may not provide phase() yet

            _phase_fn = memgap.phase
        except (ImportError, AttributeError):
            _phase_fn = None
    return _phase_fn


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def mark(name: str) -> int:
    """Mark phase ``name``: snapshot through ``memgap.phase`` when memgap records
    this process, and print ``memgap-phase: <name> rss_kib=<VmRSS>``. Returns the RSS (KiB)
    read before the snapshot, so the line shows the program, not the observer."""
    if not PHASE_NAME.match(name):
        raise ValueError(f"phase name must be lowercase words joined by dashes: {name!r}")
    rss = rss_kib()
    phase = _resolve_phase()
    if phase is not None:
        phase(name)
    _emit(f"memgap-phase: {name} rss_kib={rss}")
    return rss


def result(scenario: str, **fields: Any) -> None:
    """Print the one ``memgap-result:`` summary line."""
    body = " ".join(f"{k}={v}" for k, v in fields.items())
    _emit(f"memgap-result: {scenario} {body}".rstrip())


def idle(rest_seconds: float, *, rest_first: bool = False) -> int:
    """The idle tail: ``gc.collect()`` twice, mark ``idle``, rest.

    With ``rest_first`` the rest comes before the mark (``idle`` is then the
    post-rest figure, as in the asyncio report). Returns the idle RSS in KiB.
    """
    gc.collect()
    gc.collect()
    if rest_first and rest_seconds > 0:
        time.sleep(rest_seconds)
    rss = mark("idle")
    if not rest_first and rest_seconds > 0:
        time.sleep(rest_seconds)
    return rss
