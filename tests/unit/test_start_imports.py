"""What starting a command loads (issue 30, a quick start), read from the source with ``ast``.

Importing a module runs its module-level imports, those under ``if``/``try`` at the top included,
but not those inside a function or under ``TYPE_CHECKING``: ``loaded_by`` follows exactly those,
so each test below says what ``import X`` brings in, and fails when someone moves a heavy import
back to the top of a module on a command's path. What a command imports while it runs (the
runtimes' readers, the agent's client) is held by tests/live/test_cli.py, on a real process.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import memgap.cli
from memgap.cli import COMMANDS

SRC = Path(__file__).resolve().parents[2] / "src"


def _source(module: str) -> tuple[Path, bool] | None:
    """The file of a module of memgap's (and whether it is a package), None for any other."""
    base = SRC.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when imported: not in functions, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            found += _top_level(node.orelse if _type_checking(node.test) else node.body + node.orelse)
        elif isinstance(node, ast.Try):
            found += _top_level(node.body + node.orelse + node.finalbody
                                + [s for h in node.handlers for s in h.body])
        elif isinstance(node, (ast.With, ast.ClassDef)):
            found += _top_level(node.body)
    return found


def _with_parents(name: str) -> list[str]:
    """``a.b.c`` runs ``a``, ``a.b`` and ``a.b.c``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _imports(module: str) -> list[str]:
    """Every module the import of ``module`` asks for at its top (memgap's or any other)."""
    path, package = _source(module) or (None, False)
    if path is None:
        return []
    out = _with_parents(module)[:-1]  # a submodule runs its packages first
    for node in _top_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            out += [n for alias in node.names for n in _with_parents(alias.name)]
            continue
        base = module if package else module.rpartition(".")[0]
        if node.level:
            base = ".".join(base.split(".")[:len(base.split(".")) - (node.level - 1)])
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        out += _with_parents(target)
        out += [f"{target}.{a.name}" for a in node.names if _source(f"{target}.{a.name}") is not None]
    return out


def loaded_by(*start: str) -> set[str]:
    """The modules ``import start`` loads: memgap's by full name, the others by their top name."""
    seen: set[str] = set()
    todo = [n for s in start for n in _with_parents(s)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [n for n in _imports(name) if n not in seen]
    return {n if n.startswith("memgap") else n.split(".")[0] for n in seen}


def test_the_walk_sees_what_a_command_loads():
    """The walk is not vacuous: inspect's command loads the snapshot's code and rich's tables, and a
    function-level or TYPE_CHECKING import is left out (inspect's gdb, loaded only for --deep)."""
    inspect = loaded_by("memgap.cli.inspect")
    assert {"memgap.explain.snapshot", "memgap.report.terminal", "memgap.cli._common", "rich", "argparse",
            "memgap.documents.snapshot", "memgap.errors"} <= inspect
    assert "memgap.inside.gdb" not in inspect and "memgap.sources.gdb_options" not in inspect
    assert "memgap.documents.records" in loaded_by("memgap.explain.tree")


def test_memgap_help_loads_no_command_nor_rich_nor_typing():
    """``memgap --help`` lists the commands from ``COMMANDS``: the package of the command line loads
    argparse and memgap's errors, none of the commands' modules, rich or typing."""
    loaded = loaded_by("memgap.cli", "memgap.__main__")
    commands = {f"memgap.cli.{name.replace('-', '_')}" for name in COMMANDS}
    assert not loaded & commands
    assert not loaded & {"rich", "typing", "memgap.cli._common", "memgap.documents.snapshot"}, sorted(loaded)
    assert {"argparse", "memgap.errors"} <= loaded


def test_memgap_help_builds_no_command(monkeypatch, capsys):
    """main(["--help"]) lists every command without asking for any command's module."""
    asked: list[str] = []
    monkeypatch.setattr(memgap.cli, "command_module", lambda name: asked.append(name))
    with pytest.raises(SystemExit) as exit_:
        memgap.cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert asked == [] and all(name in out for name in COMMANDS)
    assert memgap.cli.main([]) == 2 and asked == []


# Modules a look at one process does not need, each with why: the command loads none of them.
NOT_FOR_A_LOOK = {
    "memgap.documents.records": "the run's and the lab's documents (a tree's, for --tree only)",
    "memgap.documents.lab_summary": "the lab's summaries",
    "memgap.explain.tree": "a tree at one moment (--tree)",
    "memgap.record": "memgap run",
    "memgap.lab": "memgap lab",
    "memgap.native.build": "building the native agent",
    "memgap.allocators.catalog": "the lab's allocator variants",
    "memgap.runtimes.go_state": "a Go heap's layout (read only where the process is Go)",
    "memgap.runtimes.go_dwarf": "Go's DWARF",
    "memgap.runtimes.jvm_parse": "a JVM's figures (read only where libjvm.so is mapped)",
    "memgap.sources.hsperfdata": "a JVM's perf data",
    "memgap.inside.gdb": "--deep and --trim",
    "memgap.report.html": "the HTML report",
}


@pytest.mark.parametrize("start", [
    "memgap.cli.inspect",       # the command, parsed and run
    "memgap.agent.client",      # asked where a process preloads the agent
    "memgap.runtimes.go", "memgap.runtimes.jvm", "memgap.runtimes.v8",  # each asked whether it is its runtime's
    "memgap.diagnose.findings",
])
def test_a_look_loads_nothing_it_does_not_use(start):
    loaded = loaded_by(start)
    extra = {m: why for m, why in NOT_FOR_A_LOOK.items() if m in loaded or any(x.startswith(m + ".") for x in loaded)}
    assert not extra, f"import {start} loads what a look does not use: {extra}"
