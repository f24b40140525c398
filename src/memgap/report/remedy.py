"""A recommendation's lines as text: for a shell, a Dockerfile, systemd, Kubernetes and Python.

``remedy_forms`` turns the data (``documents.RemedyLines``: what to set, what to run once)
into every form the lab document carries and ``report.lab`` prints.
"""
from __future__ import annotations

import json
from typing import Any

from memgap.documents.records import RemedyLines


def remedy_forms(lines: RemedyLines) -> dict[str, Any]:
    """``lines`` in every form, keyed as the lab document's ``recommendation`` holds them:
    env, setup, shell, dockerfile, systemd, kubernetes, python, python_plain, notes."""
    items = list(lines.env.items())
    return {
        "env": dict(lines.env),
        "setup": list(lines.setup),
        "shell": [f"{k}={_quote(v)}" for k, v in items],
        "dockerfile": "\n".join([*(f"RUN {_command(c)}" for c in lines.setup),
                                 *(["ENV " + " \\\n    ".join(f"{k}={_quote(v)}" for k, v in items)]
                                   if items else [])]),
        "systemd": [f'Environment="{k}={v}"' for k, v in items],
        "kubernetes": kubernetes_env(items),
        "python": ("import os\n"
                   "# before the child process starts: the allocator reads these when it starts\n"
                   f"os.environ.update({dict(items)!r})\n"
                   "# multiprocessing children (spawn or forkserver) and subprocess.Popen inherit os.environ"),
        "python_plain": lines.python_plain,
        "notes": list(lines.notes),
    }


def kubernetes_env(items: list[tuple[str, str]]) -> str:
    """A container's ``env:`` list in a Kubernetes manifest (a Deployment's
    ``spec.template.spec.containers[]``); every value a quoted string, as Kubernetes requires
    ("" where there is nothing to set)."""
    if not items:
        return ""
    return "env:\n" + "".join(f"  - name: {k}\n    value: {json.dumps(v)}\n" for k, v in items).rstrip("\n")


def _command(line: str) -> str:
    """A setup line without its comment, for a Dockerfile's RUN."""
    return line.split("   #")[0]


def _quote(value: str) -> str:
    """A value as the shell and a Dockerfile read it."""
    if value and all(c.isalnum() or c in "/._-:,=+" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'
