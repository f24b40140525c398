"""The ``memgap`` command: one module per subcommand, thin over the library."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..errors import MemgapError
from . import agent, demo, inspect, lab, report, run, snapshot, top

COMMANDS = {"inspect": inspect, "top": top, "run": run, "lab": lab, "report": report, "demo": demo,
            "snapshot": snapshot, "agent": agent}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command].main(args)
    except MemgapError as exc:
        print(f"memgap: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("memgap: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
