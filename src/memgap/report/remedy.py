"""A recommendation's lines as text: for a shell, a Dockerfile, systemd, Kubernetes and Python.

``remedy_forms`` turns the data (``documents.RemedyLines``: what to set, what to run once)
into every form the lab document carries and ``report.lab`` prints; ``with_forms`` gives a
recommendation (``lab_with_forms``: every one of a lab document) its forms where it has none:
the lab stores the data, its forms are rendered here, at the edge, for the JSON and the report.
"""
from __future__ import annotations

import dataclasses
import json
from typing import TypedDict

from memgap.documents.lab_summary import Recommendation
from memgap.documents.records import LabDocument, RemedyLines

FORMS = ("shell", "dockerfile", "systemd", "kubernetes", "python")  # what remedy_forms renders from the data


class RemedyForms(TypedDict):
    """A recommendation's data and its every form, as the lab document's ``recommendation`` holds them."""

    env: dict[str, str]
    setup: list[str]
    shell: list[str]
    dockerfile: str
    systemd: list[str]
    kubernetes: str
    python: str
    python_plain: str
    notes: list[str]


def remedy_forms(lines: RemedyLines) -> RemedyForms:
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


def with_forms(rec: Recommendation) -> Recommendation:
    """``rec`` with its forms: as it carries them (a saved lab's, shown as they were written), else
    rendered from its data (the lab's own)."""
    if rec.carries_forms():
        return rec
    forms = remedy_forms(RemedyLines(rec.env, rec.setup, rec.python_plain, rec.notes))
    return dataclasses.replace(rec, shell=forms["shell"], dockerfile=forms["dockerfile"], systemd=forms["systemd"],
                               kubernetes=forms["kubernetes"], python=forms["python"])  # FORMS, each


def lab_with_forms(lab: LabDocument) -> LabDocument:
    """A copy of ``lab`` whose recommendations (the top one, each cell's) carry their forms: what the
    lab's JSON holds (``cli._common.write_lab``)."""
    cells = [dataclasses.replace(c, recommendation=with_forms(c.recommendation) if c.recommendation else None)
             for c in lab.cells]
    return dataclasses.replace(lab, recommendation=with_forms(lab.recommendation) if lab.recommendation else None,
                               cells=cells)


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
