"""Argument types that refuse a bad value where it is parsed, saying what was wanted.

argparse reports an ArgumentTypeError as "argument --timeout: MESSAGE"; the
parser turns that into a UsageError (one line, exit code 2), so no command
has to check its numbers again.
"""
from __future__ import annotations

import argparse
import math
import os
import re
from typing import Callable, TypeVar

N = TypeVar("N", int, float)


def _bounded(convert: Callable[[str], N], ok: Callable[[N], bool], wanted: str) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not (math.isfinite(value) and ok(value)):  # nan slips past any comparison; inf seconds never end
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    return parse


def folder(text: str) -> str:
    """An existing folder: a --proc-root that is not one would read as every process gone."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


# /proc has no PID 0 (the kernel's idle task has no entry) and none below it
pid = _bounded(int, lambda v: v >= 1, "a valid PID (a whole number from 1 up)")
seconds = _bounded(float, lambda v: v > 0, "a valid number of seconds (more than 0)")
seconds_or_zero = _bounded(float, lambda v: v >= 0, "a valid number of seconds (0 or more)")
share = _bounded(float, lambda v: v >= 0, "a valid share (0 or more: 0.05 is 5%)")
count = _bounded(int, lambda v: v >= 1, "a valid count (a whole number from 1 up)")
port = _bounded(int, lambda v: 0 <= v <= 65535, "a valid port (0 to 65535; 0: any free one)")
count_or_zero = _bounded(int, lambda v: v >= 0, "a valid count (a whole number, 0 or more)")


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)


def size(text: str) -> int:
    """Bytes, or a number with K, M, G or T (powers of 1024, as Docker and systemd read them;
    an optional "iB" or "B": 512M, 1G, 1.5GiB), more than 0."""
    found = _SIZE.fullmatch(text.strip())
    value = float(found[1]) * 1024 ** ("kmgt".index(found[2].lower()) + 1 if found[2] else 0) if found else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or a number with K, M, G or T: "
                                         "512M, 1G, 1.5GiB; more than 0)")
    return int(value)


def command(text: str) -> list[str]:
    """A command line given as one string (``--load "wrk -d10s http://127.0.0.1:8000/"``)."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a command line: {exc}") from None
    if not words:
        raise argparse.ArgumentTypeError("an empty command line")
    return words
