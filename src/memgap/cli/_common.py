"""What the commands share: argument types that refuse a bad value where it is parsed,
writing output to a file or stdout, recording a run and showing it (``run``, ``demo``),
and writing a lab's outputs (``lab``, ``report``).

Commands import this module and no other command's: each stays thin and on its own. What
only ``run``, ``demo``, ``lab`` and ``report`` need (the recorder, the run and lab reports)
is imported inside the functions that use it, so that ``inspect`` or ``top`` do not load it
(each command imports only its own module, for the same reason: see ``memgap.cli``).
argparse reports an ArgumentTypeError as "argument --timeout: MESSAGE"; the parser turns
that into a UsageError (one line, exit code 2), so no command has to check its numbers again.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable

from memgap.errors import MemgapError, StoppedBySignal

TYPE_CHECKING = False  # typing's own, without importing typing: `memgap run` starts its command sooner (4 ms)
if TYPE_CHECKING:  # loaded only by the commands that use them: the recorder (run, demo), a lab (lab, report)
    from typing import Any, TypeVar

    from memgap.documents.records import LabDocument
    from memgap.record.recorder import RunOptions
    from memgap.record.tree_end import Stopped

    N = TypeVar("N", int, float)

# --- argument types ---------------------------------------------------------------------


def _bounded(convert: Callable[[str], N], ok: Callable[[N], bool], wanted: str) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not (math.isfinite(value) and ok(value)):  # nan slips past any comparison; inf seconds never end
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    return parse


def folder(text: str) -> str:
    """An existing folder: a --proc-root that is not one would read as every process gone."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


# /proc has no PID 0 (the kernel's idle task has no entry) and none below it
pid = _bounded(int, lambda v: v >= 1, "a valid PID (a whole number from 1 up)")
seconds = _bounded(float, lambda v: v > 0, "a valid number of seconds (more than 0)")
seconds_or_zero = _bounded(float, lambda v: v >= 0, "a valid number of seconds (0 or more)")
share = _bounded(float, lambda v: v >= 0, "a valid share (0 or more: 0.05 is 5%)")
count = _bounded(int, lambda v: v >= 1, "a valid count (a whole number from 1 up)")
port = _bounded(int, lambda v: 0 <= v <= 65535, "a valid port (0 to 65535; 0: any free one)")
count_or_zero = _bounded(int, lambda v: v >= 0, "a valid count (a whole number, 0 or more)")


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)


def size(text: str) -> int:
    """Bytes, or a number with K, M, G or T (powers of 1024, as Docker and systemd read them;
    an optional "iB" or "B": 512M, 1G, 1.5GiB), more than 0."""
    found = _SIZE.fullmatch(text.strip())
    value = float(found[1]) * 1024 ** ("kmgt".index(found[2].lower()) + 1 if found[2] else 0) if found else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or a number with K, M, G or T: "
                                         "512M, 1G, 1.5GiB; more than 0)")
    return int(value)


def regex(text: str) -> str:
    """A regular expression Python compiles (a bad one is a usage error where it is given, not a
    traceback once the run has started)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def output_file(text: str) -> str:
    """A file to write, or '-' for stdout: in a folder that exists (memgap makes no folders the user
    did not ask for), and not a folder itself."""
    if text == "-":
        return text
    where = os.path.dirname(text) or "."
    if not os.path.isdir(where):
        raise argparse.ArgumentTypeError(f"{text!r}: there is no folder {where!r} to write it in")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
    return text


def command(text: str) -> list[str]:
    """A command line given as one string (``--load "wrk -d10s http://127.0.0.1:8000/"``)."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a command line: {exc}") from None
    if not words:
        raise argparse.ArgumentTypeError("an empty command line")
    return words


# --- output -------------------------------------------------------------------------------


def write_json(data: Any, path: str) -> None:
    """As JSON, into a file a piece at a time (a run's document can be hundreds of MB: never one string)."""
    import json

    if path == "-":
        write_text(json.dumps(data, indent=1, default=str) + "\n", path)
        return
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, default=str)
            fh.write("\n")
    except OSError as exc:
        raise MemgapError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_text(text: str, path: str) -> None:
    """Write to a file, or to stdout for '-'."""
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise MemgapError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_lab(lab: LabDocument, json_path: str | None, html: str | None, markdown: str | None) -> None:
    """Every output asked for, then the tables (unless the JSON goes to stdout). The recommendations'
    forms (a shell's, a Dockerfile's...) are rendered here, for the JSON as for the report; a saved
    lab's stay as it was written."""
    from memgap.report.html import render_html
    from memgap.report.lab import markdown_table, render_lab
    from memgap.report.remedy import lab_with_forms

    lab = lab_with_forms(lab)
    if json_path:
        write_json(lab.to_dict(), json_path)
    if html:
        write_text(render_html(lab), html)
    if markdown:
        write_text(markdown_table(lab), markdown)
    if json_path != "-":
        render_lab(lab, sys.stdout)


# --- a run recorded and shown (run, demo) -------------------------------------------------

def record_folder(json_path: str | None) -> str:
    """Where a run is recorded: beside its JSON (JSON_PATH.d), else a new temporary folder."""
    from memgap.record.recording import new_temporary_folder

    return f"{json_path}.d" if json_path and json_path != "-" else new_temporary_folder("memgap-run-")


def run_and_report(options: RunOptions, json_path: str | None) -> int:
    """Record a run as `memgap run` does (into ``options.record_dir``: see ``record_folder``), write
    the run as JSON where asked, show its tables; the command's exit code."""
    from memgap.record import tree_end
    from memgap.record.recorder import record_run

    record_dir = options.record_dir
    make_record_folder(record_dir)
    if options.forked is None:
        options.forked = _import_the_report
    try:
        code = record_run(options)
    except KeyboardInterrupt as stop:
        # Ctrl-C, SIGTERM, SIGHUP: the tree ended, the recording up to it is kept. Write and show it as
        # for a run that ended (the lab does the same), and say where it is: without --json, a
        # temporary folder nobody was told of.
        _write_and_show(record_dir, json_path)
        if isinstance(stop, tree_end.Stopped) and stop.signum != signal.SIGINT:
            raise StoppedBySignal(stop.signum, _stopped_line(stop, record_dir)) from None
        print(f"memgap run: interrupted; the recording so far is in {record_dir} (memgap report {record_dir})",
              file=sys.stderr)
        raise
    _write_and_show(record_dir, json_path)
    return code


def _import_the_report() -> None:
    """What the report at the end imports, imported while the command runs, in a thread (started once the
    command has: memgap's reader is never a copy made while it imports): 0.15-0.4 s off the run's end; and the
    run document's field types evaluated (0.01 s)."""
    def imports() -> None:
        import memgap.report.run  # noqa: F401
        from memgap.documents.fields import prepare
        from memgap.documents.records import RunDocument
        from memgap.documents.snapshot import Snapshot

        prepare(RunDocument, Snapshot)

    threading.Thread(target=imports, name="memgap-report-imports", daemon=True).start()


def _stopped_line(stop: Stopped, record_dir: str) -> str:
    """What a run stopped by SIGTERM or SIGHUP says: how its tree ended, where its recording is."""
    ending = stop.ending
    how = ""
    if ending is not None:
        killed = f"{ending.killed} process{'es' if ending.killed != 1 else ''} SIGKILLed" if ending.killed else \
            "none needed SIGKILL"
        how = f": {ending.forwarded} passed on to the command, {ending.grace:g} s grace, {killed}"
    return (f"stopped by {signal.Signals(stop.signum).name}{how}; the recording so far is in {record_dir} "
            f"(memgap report {record_dir})")


def make_record_folder(record_dir: str) -> None:
    """The run's recording folder, made for it alone (memgap.record.recording.make_record_folder): FILE.d of an
    earlier run of this user's with the same --json goes, as FILE does; any other folder is refused."""
    from memgap.record.recording import SAMPLES_FILE, make_record_folder as make

    make(record_dir, lambda names: SAMPLES_FILE in names, "a memgap recording", "--json")


def _write_and_show(record_dir: str, json_path: str | None) -> None:
    from memgap.record.assemble import load_run
    from memgap.report.run import render_run

    run = load_run(record_dir)
    if json_path:
        write_json(run.to_dict(), json_path)
    if json_path != "-":
        render_run(run, sys.stdout)
        if not json_path:
            print(f"recording kept in {record_dir}")
