"""Whether this process is memgap's own command rather than a program that imported memgap (the API, the
pytest plugin, `memgap run`'s bootstrap in its child): what memgap may do to the process it runs in depends on
it (a fork, for one: in another's program its fork handlers would run and its memory be copied). memgap's
command line says so before a command runs; nothing else does. Imports nothing: the command line's start
pays for no module it does not use."""
from __future__ import annotations

_COMMAND = False


def mark_command() -> None:
    """Called by memgap's command line, once, before the command runs."""
    global _COMMAND
    _COMMAND = True


def is_command() -> bool:
    return _COMMAND
