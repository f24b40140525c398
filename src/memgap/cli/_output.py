"""Writing JSON output: to a file or stdout, with the error on failure."""
from __future__ import annotations

import json
import sys
from typing import Any

from ..errors import MemgapError


def write_json(data: Any, path: str) -> None:
    write_text(json.dumps(data, indent=1, default=str) + "\n", path)


def write_text(text: str, path: str) -> None:
    """Write to a file, or to stdout for '-'."""
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise MemgapError(f"cannot write {path}: {exc.strerror or exc}") from None
