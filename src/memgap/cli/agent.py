"""Print where memgap's native agent is (building it if it has to), and how to preload it.

The agent is a small C library: LD_PRELOAD it into any program (C, Rust, Go
with cgo, Java...) to let `memgap inspect` and `memgap top` read its allocator's
own statistics, and to run memgap's idle trimmer without changing the program:

  LD_PRELOAD=$(memgap agent --path) MEMGAP_TRIMMER=1 ./server
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from memgap.agent import AGENT_ENV, library_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", action="store_true", help="print only the library's path")


@dataclass(frozen=True)
class AgentRequest:
    """``memgap agent``'s one option."""

    path: bool = False  # print only the library's path

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AgentRequest:
        return cls(path=args.path)


def main(args: argparse.Namespace) -> int:
    return execute(AgentRequest.from_args(args))


def execute(request: AgentRequest) -> int:
    path = library_path()
    if request.path:
        print(path)
        return 0
    print(f"agent library: {path}")
    print("preload it (after any allocator you preload):")
    print(f"  LD_PRELOAD={path} {AGENT_ENV}=on PROGRAM ...")
    print("and add, to trim what the allocator holds once the program goes quiet after a burst:")
    print("  MEMGAP_TRIMMER=1        (or MEMGAP_TRIM_EVERY=SECONDS for a periodic trim)")
    print("its socket (mode 0600): $MEMGAP_AGENT_DIR, else /tmp/memgap-agent-UID, as agent-PID.sock")
    return 0
