"""memgap's native agent: a small C library to LD_PRELOAD into any process.

    path = memgap.agent.library_path()          # built at install, or now
    env = memgap.agent.agent_env()              # LD_PRELOAD and MEMGAP_AGENT for a child
    report = memgap.agent.query(pid, "stats")   # mallinfo2, malloc_info, jemalloc stats...

It serves the allocator's own statistics and a trim over a Unix socket private
to the user (mode 0600, peers checked), and runs the idle or periodic trimmer
when MEMGAP_TRIMMER / MEMGAP_TRIM_EVERY ask for it. Its threads never call
malloc, so it adds no glibc arena. See agent.c for the protocol.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's own, without importing typing: the agent is preloaded before `memgap run`'s
if TYPE_CHECKING:      # command starts (typing: 4 ms)
    from typing import Any

    from memgap.agent.client import query, socket_path, trim
    from memgap.agent.reply import AgentReport, parse_report

__all__ = ["AgentReport", "agent_env", "library_path", "parse_report", "query", "socket_path",
           "trim", "AGENT_ENV"]

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "agent.c")
AGENT_ENV = "MEMGAP_AGENT"  # off | auto (not in Python interpreters) | on
FLAGS = ["-O2", "-shared", "-fPIC", "-pthread"]
_LATER = {"query": "client", "socket_path": "client", "trim": "client", "AgentReport": "reply", "parse_report": "reply"}


def __getattr__(name: str) -> Any:
    """The client and the reply's parsers, imported on first use: `memgap run` preloads the agent
    (agent_env) before it starts its command, and asks no agent until the command runs."""
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LATER[name]}"), name)


def library_path() -> str:
    """The agent's shared library: the one the install built, or one built now.

    In a source checkout, a build older than agent.c is not used (the source
    changed since). Raises ToolMissing when it has to be built and there is no
    C compiler.
    """
    # the build (hashlib, shutil, the compiler's search) only here: every outside look imports this
    # package to ask a process's agent, and most have none
    from memgap.native.installed import shared_library

    return shared_library(SOURCE, os.path.join(HERE, "_memgap_agent*.so"), "memgap-agent.so", FLAGS)


def agent_env(base: dict[str, str] | None = None, mode: str = "on") -> dict[str, str]:
    """``base`` (default os.environ) with the agent preloaded, in front of any LD_PRELOAD
    already there (it defines no malloc: an allocator's further on is still malloc).

    ``mode`` "auto" leaves Python interpreters alone (memgap's bootstrap
    observes those from inside).
    """
    from memgap.allocators.ld_preload import preloaded

    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = preloaded(library_path(), env.get("LD_PRELOAD", ""))
    env[AGENT_ENV] = mode
    return env
