"""What the bootstrap installs in a Python child of ``memgap run``."""
from __future__ import annotations

import atexit


def _at_exit() -> None:
    from .api import _record

    try:
        _record("exit")
    except Exception:  # noqa: BLE001 - never turn the program's exit into a failure
        pass


def install() -> None:
    atexit.register(_at_exit)
