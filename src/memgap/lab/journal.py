"""The lab's journal, ``lab.jsonl`` in the lab's folder: everything about it.

Written as the lab goes (``Journal``: a header, each run as it ends, the variants the baseline's
findings add, why the lab stopped), so that a lab killed halfway keeps every run it finished;
the folder checked before a lab takes it (``take_folder``); read back into the lab's document
(``rebuild``: the only record of a lab run without --json, or killed before it wrote it). The
commands call these and know nothing of the file's lines.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType
from typing import TypedDict, cast

from memgap.allocators.catalog import CATALOGUE, PRELOADABLE, find_library
from memgap.allocators.variants import Variant, parse_variant
from memgap.documents.json_value import shaped
from memgap.documents.recorded import MachineInfo
from memgap.documents.records import LAB_SCHEMA, LabDocument, RunFigures
from memgap.errors import MalformedInput
from memgap.lab.document import lab_document
from memgap.lab.state import LabOptions, LabState
from memgap.record.recorder import machine_info
from memgap.record.recording import RecordingWriter, make_record_folder, private_folder, read_events

LAB_EVENTS = "lab.jsonl"  # the lab's header and each finished run, appended as they come


class LabEvent(TypedDict, total=False):
    """A line of the journal: the header (the lab's options), a run (its figures' keys besides), the variants
    the baseline's findings chose, the reason the lab stopped."""

    type: str
    schema: str
    cmd: list[str]
    reps: int
    variants: list[str]
    skipped: list[str]
    machine: MachineInfo
    memory_limit: int | None
    chosen: dict[str, str]
    added: list[str]
    reason: str
    objective: str  # --objective ("" or absent: by the workload); since issue 32
    load: list[str]  # --load's command, whose service is judged by its mean by default; since issue 32


def journal_path(lab_dir: str) -> str:
    return os.path.join(lab_dir, LAB_EVENTS)


def is_lab_folder(path: str) -> bool:
    """Whether ``path`` is a lab's folder (its journal there)."""
    return os.path.exists(journal_path(path))


def take_folder(path: str) -> bool:
    """The folder for a lab's recordings (``lab --dir``), made before the first run so that a bad one
    fails first, as ``run --json`` makes its FILE.d (memgap.record.recording.make_record_folder): the
    user's own, 0700, no one else may write in it. An earlier lab's recordings there go (its runs would
    be read back mixed with this one's): True where they did; a folder holding anything else is
    refused (UsageError), untouched."""

    def earlier_lab(names: list[str]) -> bool:
        return LAB_EVENTS in names and all(n == LAB_EVENTS or n.startswith("run-") for n in names)

    return make_record_folder(path, earlier_lab, "a memgap lab's folder", "--dir")


def worth_running(variant: Variant, runs: Sequence[RunFigures]) -> bool:
    """Whether the lab runs ``variant``, given its runs so far: not a Python setting once the runs that
    saw the workload's main process show it is not a Python program. The runner asks before each run;
    a lab rebuilt from its journal counts the runs it planned by it."""
    if not variant.python_only:
        return True
    seen = [r for r in runs if r.layers or r.idle is not None]  # runs that saw their main process
    return not seen or any(r.python for r in seen)


class Journal:
    """``lab.jsonl``, appended as the lab goes; the folder made 0700 first (one there already: the
    user's own, no one else writes in it)."""

    def __init__(self, lab_dir: str) -> None:
        private_folder(lab_dir)
        self._writer = RecordingWriter(journal_path(lab_dir))

    def header(self, options: LabOptions, state: LabState) -> None:
        self._writer.write({"type": "header", "schema": LAB_SCHEMA, "cmd": options.cmd, "reps": options.reps,
                            "variants": [v.spec for v in options.variants], "skipped": options.skipped,
                            "machine": shaped(machine_info()), "memory_limit": options.memory_limit,
                            "chosen": state.chosen, "objective": options.objective, "load": list(options.load)})

    def run(self, result: RunFigures) -> None:
        self._writer.write({"type": "run", **result.to_dict()})

    def chosen(self, changed: dict[str, str], added: list[str]) -> None:
        """What the baseline's findings added (``added``, right after the baseline) and the reasons they changed."""
        self._writer.write({"type": "chosen", "chosen": changed, "added": added})

    def stopped(self, reason: str) -> None:
        self._writer.write({"type": "stopped", "reason": reason})

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def rebuild(path: str) -> LabDocument:
    """The lab document again, from the header and runs of the journal in folder ``path``, whole or
    cut short. The journal keeps neither the slowdown budget nor the lab's own time: the default
    budget and the runs' time stand in, and the document says so."""
    where = journal_path(path)
    events = cast("list[LabEvent]", list(read_events(where)))  # checked as they are taken apart
    header = next((e for e in events if e.get("type") == "header"), None)
    if header is None:
        raise MalformedInput(where, "no header line")
    runs = [RunFigures.from_dict(e, f"{where}, run") for e in events if e.get("type") == "run"]
    try:
        options, state = _replay(header, events, runs, path)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedInput(where, f"not a lab's header and runs ({exc!r})") from None
    planned = sum(worth_running(v, runs) for v in state.variants) * options.reps * len(options.cells())
    lab = lab_document(options, state, sum(r.duration for r in runs), interrupted=len(runs) < planned)
    lab.machine = header.get("machine", lab.machine)
    lab.warnings.insert(0, f"rebuilt from {LAB_EVENTS}, which keeps neither --max-slowdown nor the lab's own time: "
                           f"the verdict takes the default {options.max_slowdown:.0%} budget, and the lab's time "
                           "is its runs' (its --json keeps both)")
    return lab


def _replay(header: LabEvent, events: list[LabEvent], runs: list[RunFigures],
            path: str) -> tuple[LabOptions, LabState]:
    """The lab's options as its header gives them, and its state as its events left it."""
    variants = [parse_variant(spec) for spec in header["variants"]]
    options = LabOptions(tuple(header["cmd"]), tuple(variants), int(header["reps"]), lab_dir=path,
                         skipped=tuple(header.get("skipped", [])), params=_swept(runs),
                         memory_limit=header.get("memory_limit"), objective=header.get("objective", ""),
                         load=tuple(header.get("load") or ()))
    chosen = dict(header.get("chosen") or {})  # as the lab said (a lab of an earlier memgap said nothing)
    for event in (e for e in events if e.get("type") == "chosen"):  # what the baseline's findings added
        chosen.update(event["chosen"])
        at = next((i for i, v in enumerate(variants) if v.is_baseline), 0) + 1  # as the lab put them
        variants[at:at] = [parse_variant(spec) for spec in event["added"]]
    for v in variants:  # the preload the recommendation prints: where this machine has the library
        if v.allocator in PRELOADABLE:
            v.library = find_library(v.allocator) or CATALOGUE[v.allocator].library
    return options, LabState(variants, chosen, list(options.skipped), results=runs)


def _swept(runs: list[RunFigures]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The swept parameters and their values, in the order the runs met them."""
    grid: dict[str, list[str]] = {}
    for r in runs:
        for name, value in r.params.items():
            if value not in grid.setdefault(name, []):
                grid[name].append(value)
    return tuple((name, tuple(values)) for name, values in grid.items())
