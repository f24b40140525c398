"""The ``memgap`` command: one module per subcommand, thin over the library."""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from ..errors import MemgapError, UsageError
from . import agent, demo, inspect, lab, report, run, serve_metrics, snapshot, top

COMMANDS = {"inspect": inspect, "top": top, "run": run, "lab": lab, "report": report, "demo": demo,
            "snapshot": snapshot, "agent": agent, "serve-metrics": serve_metrics}


class _Parser(argparse.ArgumentParser):
    """Bad arguments become a UsageError: one line and exit code 2, like every other
    usage mistake memgap finds (argparse would print its usage block and exit itself)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "memgap lab" -> "lab"; subparsers are of this class too
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memgap",
        description="Explain where a process's resident memory (RSS) went, layer by layer.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or "").strip()
        p = sub.add_parser(name, help=doc.splitlines()[0] if doc else None, description=doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 2
        return COMMANDS[args.command].main(args)
    except MemgapError as exc:
        print(f"memgap: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("memgap: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
