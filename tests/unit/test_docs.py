"""The docs against the code: a page that drifts from what memgap does fails here.

Fast and in-process: the commands' parsers, the error classes, documents the code
makes (a snapshot of this process, a tree of it, a run assembled from an empty
recording, a lab document from one hand-made run), and the files the docs link to.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re

import pytest

from conftest import HERE

ROOT = os.path.dirname(HERE)
DOCS = os.path.join(ROOT, "docs")
COMMAND_DOCS = os.path.join(DOCS, "commands")
MiB = 1 << 20


def read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


def pages() -> list[str]:
    """README.md, tests/README.md and every Markdown page under docs/, relative to the root."""
    found = ["README.md", os.path.join("tests", "README.md")]
    for folder, _, files in os.walk(DOCS):
        found += [os.path.relpath(os.path.join(folder, f), ROOT) for f in sorted(files) if f.endswith(".md")]
    return found


def section(text: str, heading: str) -> str:
    """The text under a heading (any level), up to the next heading of that level or higher."""
    found = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
    assert found, f"no heading {heading!r}"
    level = len(found[1])
    rest = text[found.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table in ``text``: its rows (header and separator left out) as cells."""
    out: list[list[list[str]]] = []
    rows: list[list[str]] | None = None
    for line in text.split("\n"):
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if rows is None:
                rows = []  # the header
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows is not None:
            out.append(rows)
            rows = None
    if rows is not None:
        out.append(rows)
    return out


def field_names(table: list[list[str]]) -> set[str]:
    """The first column's names: `name` in backticks."""
    names = set()
    for row in table:
        found = re.fullmatch(r"`([\w.]+)`", row[0])
        assert found, f"a field row whose first cell is not a `name`: {row}"
        names.add(found[1])
    return names


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --- the README ------------------------------------------------------------------------------

def test_the_readme_is_a_front_door():
    readme = read("README.md")
    assert len(readme.split("\n")) - (readme.endswith("\n")) <= 200
    # the two commands, word for word; CI runs the second
    assert "```sh\nsh scripts/setup.sh && .venv/bin/memgap demo\n```" in readme
    assert "```sh\nsh scripts/test.sh\n```" in readme
    assert "sh scripts/test.sh" in read(".ci", "run")
    # it links every docs page
    for page in pages():
        if page.startswith("docs" + os.sep) and os.path.dirname(page) == "docs" and page != "docs/README.md":
            assert f"({page})" in readme, f"README.md does not link {page}"


# --- commands ----------------------------------------------------------------------------------

def subparsers() -> dict[str, argparse.ArgumentParser]:
    from memgap.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_a_page_and_every_page_a_command():
    commands = set(subparsers())
    documented = {f[:-3] for f in os.listdir(COMMAND_DOCS) if f.endswith(".md")}
    assert commands == documented, (commands - documented, documented - commands)
    readme = read("README.md")
    for name in commands:
        assert f"(docs/commands/{name}.md)" in readme, f"README.md does not link the page of {name}"


@pytest.mark.parametrize("name", sorted(f[:-3] for f in os.listdir(COMMAND_DOCS) if f.endswith(".md")))
def test_each_page_shows_its_commands_options(name):
    """The page's --help block lists exactly the options and positionals argparse has."""
    parser = subparsers().get(name)
    assert parser is not None, f"docs/commands/{name}.md documents no command"
    page = read("docs", "commands", f"{name}.md")
    block = re.search(rf"```text\n(usage: memgap {re.escape(name)}\b.*?)```", page, re.S)
    assert block, f"docs/commands/{name}.md has no ```text block with `memgap {name} --help`"
    helptext = block[1]
    options = helptext.split("\noptions:\n", 1)[1]
    shown = set(re.findall(r"^  (?:-\w, )?(--[\w-]+)", options, re.M))
    actual = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    assert shown == actual, f"{name}: documented {sorted(shown - actual)}, missing {sorted(actual - shown)}"
    positionals = set(re.findall(r"^  (\w+) ", helptext.split("\npositional arguments:\n", 1)[1], re.M)) \
        if "\npositional arguments:\n" in helptext else set()
    wanted = {a.metavar or a.dest for a in parser._actions if not a.option_strings}
    assert positionals == wanted, (name, positionals, wanted)
    for action in parser._actions:  # every option's help, as argparse prints it (words, not wrapping)
        if action.help and action.help != argparse.SUPPRESS:
            words = " ".join(action.help.split()[:6])
            assert words in " ".join(helptext.split()), f"{name}: the help of {action.option_strings} changed"


# --- exit codes --------------------------------------------------------------------------------

def test_the_exit_codes_table_is_the_errors_classes():
    from memgap import errors

    rows = tables(section(read("docs", "json.md"), "Exit codes"))[0]
    named: dict[str, int] = {}
    for code, classes, _meaning in rows:
        for cls in re.findall(r"`(\w+)`", classes):
            named[cls] = int(code)
    for cls, code in named.items():
        assert getattr(errors, cls).exit_code == code, (cls, code)
    defined = {n for n, obj in vars(errors).items()
               if isinstance(obj, type) and issubclass(obj, errors.MemgapError) and obj.__module__ == errors.__name__}
    assert defined == set(named), (defined - set(named), set(named) - defined)
    codes = {int(r[0]) for r in rows}
    assert codes == {0, 130} | {getattr(errors, c).exit_code for c in defined}, codes


def test_an_interrupt_exits_130_as_documented(monkeypatch):
    from memgap import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.command_module("snapshot"), "main", interrupted)
    assert cli.main(["snapshot"]) == 130


# --- JSON --------------------------------------------------------------------------------------

def json_tables(heading: str) -> list[set[str]]:
    return [field_names(t) for t in tables(section(read("docs", "json.md"), heading))]


def test_the_snapshot_fields_are_a_snapshots_keys():
    import memgap

    doc = memgap.snapshot().to_dict()
    top, layer = json_tables("Snapshot: `memgap.snapshot/1`")
    assert doc["schema"] == "memgap.snapshot/1"
    assert top == set(doc), (top - set(doc), set(doc) - top)
    some = next(iter(doc["layers"].values()))
    assert layer == set(some), (layer - set(some), set(some) - layer)


def test_the_tree_fields_are_a_trees_keys(tmp_path, capsys):
    from memgap.cli import main

    out = tmp_path / "tree.json"
    assert main(["inspect", str(os.getpid()), "--tree", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    (top,) = json_tables("Tree: `memgap.tree/1`")
    assert doc["schema"] == "memgap.tree/1" and top == set(doc), (top ^ set(doc))
    row = next(r for r in tables(section(read("docs", "json.md"), "Tree: `memgap.tree/1`"))[0] if r[0] == "`totals`")
    assert set(re.findall(r"`(\w+)`", row[1])) - {"resident"} == set(doc["totals"]), doc["totals"]


def test_the_run_fields_are_a_runs_keys(tmp_path):
    from memgap.record.assemble import load_run

    doc = load_run(str(tmp_path)).to_dict()  # an empty recording: every field, as a run cut short at once has them
    (top,) = json_tables("Run: `memgap.run/1`")
    # written where two processes or more were alive at idle; where stopped; with --load
    written = set(doc) | {"tree", "stopped", "load_started"}
    assert doc["schema"] == "memgap.run/1" and top == written, (top - written, written - top)


def test_the_lab_fields_are_a_labs_keys(tmp_path):
    from memgap.allocators.variants import parse_variant
    from memgap.documents.records import RunFigures
    from memgap.lab.document import lab_document
    from memgap.lab.state import LabOptions, LabState

    # with the figures over the work that a lab since issue 32 writes (and its objective with them), of a
    # workload that works in bursts (its slowdown by a burst's time at most: its CPU and its length)
    runs = [RunFigures(spec, rep, 0, "ok", wall=1.0, idle=idle * MiB, baseline=30 * MiB, work_mean=idle * MiB,
                       work_span=[0.0, 1.0], rests=[0.6, 0.6], work_cpu=0.3, work_wall=0.5)
            for rep in (1, 2) for spec, idle in (("glibc", 60), ("glibc:arena_max=2", 40))]
    options = LabOptions(cmd=["work"], variants=[parse_variant(s) for s in ("glibc", "glibc:arena_max=2")],
                         reps=2, lab_dir=str(tmp_path))
    state = LabState.start(options)
    state.results = runs
    doc = lab_document(options, state, 1.0).to_dict()
    top, run, variant = json_tables("Lab: `memgap.lab/1`")
    assert doc["schema"] == "memgap.lab/1" and top == set(doc), (top - set(doc), set(doc) - top)
    # written where the peak is a tree's, where it forked; where the runs recorded device memory (a GPU)
    written = set(doc["runs"][0]) | {"process_peak", "copied", "gpu_idle", "gpu_peak"}
    assert run == written, (run ^ written)
    summed = set(doc["variants"][0]) | {"gpu_idle", "gpu_peak"}
    assert variant == summed, (variant ^ summed)
    statuses = re.findall(r"`([\w-]+)`", next(r for r in tables(section(read("docs", "json.md"),
                                                                          "Lab: `memgap.lab/1`"))[1]
                                               if r[0] == "`status`")[1])
    from memgap.documents.records import RunStatus

    assert set(statuses) == {s.value for s in RunStatus}, statuses


# --- the lab's rule, the layers, the findings ---------------------------------------------------

def test_the_lab_page_states_the_verdict_rule_the_code_applies():
    from memgap.allocators.variants import DEFAULT_SPECS
    from memgap.lab.adaptive import FAR_TOO_SLOW
    from memgap.lab.document import TRIM_HINT
    from memgap.lab.verdict import MATERIAL_BYTES, MATERIAL_SHARE, material

    rule = section(read("docs", "lab.md"), "The verdict rule")
    assert f"at least **{MATERIAL_SHARE:.0%}**" in rule
    assert f"at least **{MATERIAL_BYTES / MiB:g} MiB**" in rule
    assert f"`{json.dumps(material())}`" in rule
    assert f"below {TRIM_HINT:.0%} of its idle" in rule
    reps = section(read("docs", "lab.md"), "Repetitions and interleaving")
    assert f"beyond {FAR_TOO_SLOW:g} times the budget's limit" in reps
    assert f"with the {len(DEFAULT_SPECS)} default variants" in reps
    parser = subparsers()["lab"]
    budget = next(a for a in parser._actions if "--max-slowdown" in a.option_strings).default
    assert f"`--max-slowdown` ({budget:.0%})" in rule


def test_the_layer_tables_name_every_layer():
    from memgap.allocators.gdb_layers import HELD_LAYER
    from memgap.documents.snapshot import LAYER_NAMES

    documented = [re.fullmatch(r"`(\w+)`", r[0])[1] for r in tables(read("docs", "layers.md"))[0]]
    assert documented == [*LAYER_NAMES, HELD_LAYER, "unexplained"], documented
    front = [re.fullmatch(r"`(\w+)`", r[0])[1] for r in tables(read("README.md"))[0]]
    assert front == [*LAYER_NAMES, "unexplained"], front


def test_every_finding_is_documented():
    readers = sorted(os.listdir(os.path.join(ROOT, "src", "memgap", "allocators")))  # each reader's findings
    diagnose = sorted(os.listdir(os.path.join(ROOT, "src", "memgap", "diagnose")))
    sources = "".join(read("src", "memgap", "diagnose", name) for name in diagnose if name.endswith(".py")) + "".join(
        read("src", "memgap", "allocators", name) for name in readers if name.endswith(".py"))
    codes = set(re.findall(r'Finding\(\s*"([a-z-]+)"', sources))
    assert len(codes) >= 13
    page = read("docs", "findings.md")
    missing = {c for c in codes if f"`{c}`" not in page}
    assert not missing, missing


def test_the_tests_readme_names_every_marker():
    markers = re.findall(r'"markers", "(\w+):', read("tests", "conftest.py"))
    assert markers
    text = read("tests", "README.md")
    assert text.startswith("# memgap's tests\n\n`pytest`") or "\n`pytest`" in text.split("\n## ", 1)[0]
    for marker in markers:
        assert f"`{marker}`" in text, marker


# --- links and paths ---------------------------------------------------------------------------

def anchors(path: str) -> set[str]:
    text = re.sub(r"```.*?```", "", read(path), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", pages())
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", read(page), flags=re.S)
    here = os.path.dirname(os.path.join(ROOT, page))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(here, path)) if path else os.path.join(ROOT, page)
        assert os.path.exists(full), f"{page}: {target} does not exist"
        if anchor:
            assert anchor in anchors(os.path.relpath(full, ROOT)), f"{page}: no heading for #{anchor} in {path}"


@pytest.mark.parametrize("page", pages())
def test_every_path_a_page_names_exists(page):
    """`src/...`, `tests/...`, `benchmarks/...`, `scripts/...`, `docs/...` in backticks."""
    text = read(page)
    for path in re.findall(r"`((?:src|tests|benchmarks|scripts|docs)/[\w./-]*[\w/])`", text):
        if "<" in path or "*" in path:
            continue
        assert os.path.exists(os.path.join(ROOT, path)), f"{page}: {path} does not exist"


def test_the_architecture_page_names_the_modules_as_they_are():
    page = read("docs", "architecture.md")
    named = set(re.findall(r"`(src/memgap[\w./-]*)`", page))
    assert len(named) >= 60, len(named)
    assert not [p for p in named if not os.path.exists(os.path.join(ROOT, p))]
    # and every module of the package is on the map, so a new one is placed on it
    modules = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "src", "memgap")):
        for f in files:
            rel = os.path.relpath(os.path.join(folder, f), ROOT)
            if f.endswith(".py") and "/scenarios/" not in rel and f not in ("__init__.py", "__main__.py"):
                modules.add(rel)
    unplaced = {m for m in modules if m not in named and not (m.startswith("src/memgap/cli/")
                                                                and "cli/__init__" not in m)}
    assert not unplaced, f"modules missing from docs/architecture.md: {sorted(unplaced)}"


# --- the README's status -----------------------------------------------------------------------

def _has(module: str, name: str = "") -> bool:
    import importlib
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return False
    return not name or hasattr(importlib.import_module(module), name)


def test_the_readme_status_is_true():
    """What "Not yet" names is not in the code, and what the code has is not called "not yet": a
    feature that lands without its line moving fails here (issue 25 found three stale ones)."""
    status = section(read("README.md"), "Status and limits")
    not_yet = status.partition("Not yet:")[2].split("\n\n")[0]
    done = status.partition("Not yet:")[0]
    features = {  # words in the status -> whether the code has it
        "prefixed jemalloc": _has("memgap.allocators.jemalloc_beside", "beside_jemalloc"),
        "ASGI/WSGI routes": _has("memgap.web", "ASGIMiddleware") and _has("memgap.web", "WSGIMiddleware"),
        "notebook rendering": hasattr(importlib.import_module("memgap.documents.snapshot").Snapshot, "_repr_html_"),
        "JSON Schemas": os.path.isdir(os.path.join(ROOT, "docs", "schemas")),
        "shared memory as a layer": "shared_memory" in importlib.import_module("memgap.documents.snapshot").LAYER_NAMES,
        "Go, the JVM and V8": all(_has(f"memgap.runtimes.{name}") for name in ("go", "jvm", "v8")),
    }
    for words, present in features.items():
        said_not_yet = words in not_yet
        assert said_not_yet != present, f"README's status on {words!r}: {'not yet' if said_not_yet else 'done'}, " \
                                        f"but the code {'has' if present else 'lacks'} it"
        assert present == (words in done), (words, "done but not said" if present else "said done, not in the code")
