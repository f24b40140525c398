"""The ``memgap`` command: one module per subcommand, thin over the library."""
from __future__ import annotations

import argparse
import importlib
import sys

from memgap.errors import MemgapError, UsageError

TYPE_CHECKING = False  # typing's own, without importing typing: `memgap --help` needs none of it (5-9 ms)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType
    from typing import NoReturn

# Each command's module is imported only when it runs (or for --help): importing all of them
# cost every invocation 0.15 s of CPU. Their one-line summaries, for the list, are here; a
# test keeps them equal to each module's docstring.
COMMANDS = {
    "inspect": "Explain a running process from outside, without stopping or changing it.",
    "top": "Watch a process (or a tree) from outside, live.",
    "run": "Run a command and explain its memory over time.",
    "lab": "Run a workload under allocator variants and recommend the cheapest fix that works.",
    "report": "Show a recording again: a `memgap run` folder (complete or cut short), a lab's JSON or a lab's "
              "folder.",
    "demo": "Run a field-report scenario under `memgap run` and explain it.",
    "snapshot": "Explain memgap's own process (a quick check that memgap works here).",
    "agent": "Print where memgap's native agent is (building it if it has to), and how to preload it.",
    "serve-metrics": "Serve Prometheus metrics of a process, a tree or every matching process, read from outside.",
}


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (``serve-metrics`` -> ``memgap.cli.serve_metrics``)."""
    return importlib.import_module(f".{name.replace('-', '_')}", __name__)


class _Parser(argparse.ArgumentParser):
    """Bad arguments become a UsageError: one line and exit code 2, like every other
    usage mistake memgap finds (argparse would print its usage block and exit itself)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "memgap lab" -> "lab"; subparsers are of this class too
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


def build_parser(only: str | None = None, *, listed: bool = False) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, that command's arguments in full and the others listed; with
    ``listed``, every command only listed (``memgap --help`` needs no command's module)."""
    parser = _Parser(
        prog="memgap",
        description="Explain where a process's resident memory (RSS) went, layer by layer.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if listed or (only is not None and name != only):
            sub.add_parser(name, help=summary)
            continue
        module = command_module(name)
        p = sub.add_parser(name, help=summary, description=(module.__doc__ or "").strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
    return parser


def entry() -> NoReturn:
    """The ``memgap`` command as the console script and ``python -m memgap`` run it: ``main()``, then the
    process ends without the interpreter's teardown (freeing every module's objects: 0.025 s of a run's end,
    after its report). atexit's handlers run and the standard streams are flushed first; where another
    thread that is not a daemon still runs, or a flush fails, the interpreter ends as usual (it waits for
    that thread, says what failed)."""
    code = main()
    import atexit
    import os
    import threading

    atexit._run_exitfuncs()  # what a normal exit runs first (logging's flush, the program's own)
    if all(t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(command, listed=command is None)  # no command named: none of their modules
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 2
        from memgap.sources import own_process

        own_process.mark_command()  # memgap's own process: a first look may read large libraries on several cores
        code: int = command_module(args.command).main(args)
        return code
    except MemgapError as exc:
        print(f"memgap: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("memgap: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
