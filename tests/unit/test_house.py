"""The house rules of issue 16, kept by reading the source (ast only: no import, no process).

- no function or method in src/ longer than MAX_FUNCTION lines, no module longer than MAX_MODULE;
- no command (``memgap.cli.*``) imports another command, only the common module;
- ``memgap.remedies``, ``memgap.report.*`` and ``memgap.documents.*`` import nothing from the lab or the
  commands (imports inside functions included);
- ``memgap.lab.*`` imports nothing from the report: it stores data, the report renders it;
- a private name (``_x``: a module, or a module's function) is imported only inside its own
  package (and the packages within it);
- in ``memgap.cli``, only ``main`` and ``from_args`` take an ``argparse.Namespace``: options become
  a typed request at the edge, and everything past it takes the request;
- no comparison with an allocator's name outside memgap.allocators (its readers and registry), but
  the exceptions listed with their reasons;
- a test file in tests/unit (the fast lane: scripts/test.sh --fast) names nothing that starts a program
  (subprocess, os.fork, multiprocessing..., the helpers and fixtures of tests/ that call them), opens
  a TCP connection or skips: what it needs is Python and the venv. tests/conftest.py's guard refuses
  the same at run time, where the code under test starts something itself.
"""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_FUNCTION = 60
MAX_MODULE = 600
CLI_COMMON = "memgap.cli._common"
BELOW_THE_LAB = ("memgap.remedies", "memgap.report", "memgap.documents")
ABOVE_THEM = ("memgap.lab", "memgap.cli")


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    """Every module under src/memgap by dotted name, parsed."""
    found = {}
    for path in sorted((SRC / "memgap").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


MODULES = _modules()


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str) -> list[tuple[str, str, int]]:
    """(module imported, name imported from it or "", line) for every import in module ``name``;
    ``from pkg import sub`` counts as importing ``pkg.sub`` where ``sub`` is a module."""
    path, tree = MODULES[name]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(name, path).split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, "", node.lineno) if sub in MODULES else (target, alias.name, node.lineno))
    return found


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_rules_read_the_whole_source():
    """The walk finds the modules the rules are about (a moved src/ would pass every rule vacuously)."""
    assert {"memgap.explain.attribution", "memgap.cli.inspect", CLI_COMMON, "memgap.report.lab",
            "memgap.documents.snapshot", "memgap.remedies", "memgap.lab.runner"} <= set(MODULES)
    assert CLI_COMMON in [module for module, _, _ in _imports("memgap.cli.inspect")]


def test_no_function_is_longer_than_60_lines():
    long = []
    for name, (_path, tree) in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION:
                    long.append(f"{name}.{node.name} (line {node.lineno}): {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION} lines: split them into named helpers: {long}"


def test_no_module_is_longer_than_600_lines():
    big = {name: n for name, (path, _) in MODULES.items()
           if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE}
    assert not big, f"modules over {MAX_MODULE} lines: split them by job: {big}"


def test_no_command_imports_another():
    crossed = [f"{name} line {line}: {module}" for name in MODULES if name.startswith("memgap.cli.")
               for module, _, line in _imports(name)
               if module.startswith("memgap.cli.") and module != CLI_COMMON and module != name]
    assert not crossed, f"commands import only {CLI_COMMON} of memgap.cli: {crossed}"


def test_remedies_report_and_model_import_nothing_from_the_lab_or_the_commands():
    crossed = [f"{name} line {line}: {module}" for name in MODULES if _within(name, BELOW_THE_LAB)
               for module, _, line in _imports(name) if _within(module, ABOVE_THEM)]
    assert not crossed, f"{', '.join(BELOW_THE_LAB)} must not import {', '.join(ABOVE_THEM)}: {crossed}"


def test_the_lab_imports_nothing_from_the_report():
    """The lab stores what it decides as data (a recommendation's env, setup lines, notes); the report
    renders it (a shell's, a Dockerfile's, Kubernetes' forms: memgap.report.remedy), at the edge."""
    crossed = [f"{name} line {line}: {module}" for name in MODULES if _within(name, ("memgap.lab",))
               for module, _, line in _imports(name) if _within(module, ("memgap.report",))]
    assert not crossed, f"memgap.lab must not import memgap.report: {crossed}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_a_private_name_is_imported_only_in_its_own_package():
    crossed = []
    for name, (path, _) in MODULES.items():
        home = _package(name, path)
        for module, imported, line in _imports(name):
            if not module.startswith("memgap."):
                continue
            if _private(imported):  # a private function or constant of a module: the module's package
                owner = _package(module, MODULES[module][0]) if module in MODULES else module
            elif _private(module.rpartition(".")[2]):  # a private module: its package
                owner = module.rpartition(".")[0]
            else:
                continue
            if home != owner and not home.startswith(owner + "."):  # its package and those inside it
                crossed.append(f"{name} line {line}: {module}{'.' + imported if imported else ''}")
    assert not crossed, f"private names used outside their package (make them public): {crossed}"


NAMESPACE_AT_THE_EDGE = ("main", "from_args")


def _takes_a_namespace(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = node.args
    params = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    names = {ast.unparse(p.annotation).strip("'\"") for p in params if p.annotation is not None}
    return bool(names & {"argparse.Namespace", "Namespace"})


def test_only_main_and_from_args_take_a_namespace():
    at_the_edge, crossed = [], []
    for name, (_path, tree) in MODULES.items():
        if not _within(name, ("memgap.cli",)):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _takes_a_namespace(node):
                where = f"{name}.{node.name} (line {node.lineno})"
                (at_the_edge if node.name in NAMESPACE_AT_THE_EDGE else crossed).append(where)
    commands = [name for name in MODULES if name.startswith("memgap.cli.") and not _private(name.rpartition(".")[2])]
    assert len(at_the_edge) >= 2 * len(commands), f"the rule reads every command's main and from_args: {at_the_edge}"
    assert not crossed, f"only main and from_args take an argparse.Namespace; pass the typed request on: {crossed}"


# --- no branch on an allocator's name outside its reader (issue 24, item 1) -------------------------

ALLOCATOR_NAMES = {"glibc", "jemalloc", "tcmalloc", "mimalloc", "pymalloc"}
# Where a comparison with an allocator's name is its own module's business or not a branch of the
# pipeline: each with why. Counted, so that one more in these files fails too (and one fewer asks for
# its line to go).
NAME_COMPARISONS_ALLOWED = {
    # detection itself: telling the allocators apart by their symbols and libraries (glibc is the C
    # library every process maps: its malloc counts only where it serves malloc); what the registry reads
    "memgap.sources.allocator": 7,
    # the agent's reply is a wire format: its sections are named by allocator (agent.c writes them)
    "memgap.agent.reply": 2,
    # a jemalloc beside glibc's malloc (Redis, Rust services): a module about that pair, by name
    "memgap.inside.jemalloc_beside": 2,
}


def _names_an_allocator(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in ALLOCATOR_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_allocator(e) for e in node.elts)
    return False


def test_no_branch_on_an_allocators_name_outside_its_reader():
    """A comparison (``==``, ``!=``, ``in``) with a string naming an allocator, outside memgap.allocators
    (each allocator's reader, the registry, the lab's catalogue and variants): the pipeline asks the
    reader (memgap.allocators.registry.reader_for) instead. Display text and dict keys are no comparison."""
    found: dict[str, list[str]] = {}
    for name, (path, tree) in _modules().items():
        if name == "memgap.allocators" or name.startswith("memgap.allocators."):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(map(_names_an_allocator, [node.left, *node.comparators])):
                found.setdefault(name, []).append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    counts = {name: len(lines) for name, lines in found.items()}
    wrong = {n: found[n] for n in found if counts[n] != NAME_COMPARISONS_ALLOWED.get(n)}
    assert counts == NAME_COMPARISONS_ALLOWED, wrong


# --- tests/unit starts nothing ------------------------------------------------------------------

TESTS = SRC.parent / "tests"
# What starts a program (or dials out), by module. ``os.popen`` and ``os.spawn*`` included: they
# fork under the hood.
STARTERS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execl", "execle", "execlp",
           "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
           "spawnve", "spawnvp", "spawnvpe"},
    "multiprocessing": {"Process", "Pool", "get_context", "Manager"},
    "concurrent.futures": {"ProcessPoolExecutor"},
    "pty": {"fork", "spawn"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "socket": {"create_connection", "create_server"},
}
# pytester's own (its runpytest runs pytest in this process)
PYTESTER_STARTERS = {"runpytest_subprocess", "spawn", "spawn_pytest", "popen", "run"}
SKIPS = {"pytest.skip", "pytest.importorskip", "pytest.mark.skip", "pytest.mark.skipif"}


def _names_a_starter(node: ast.AST) -> str | None:
    """``subprocess.run``, ``os.fork``, ``pytester.runpytest_subprocess``...: the dotted name, or None."""
    if isinstance(node, ast.Attribute):
        base = ast.unparse(node.value)
        if node.attr in STARTERS.get(base, ()):
            return f"{base}.{node.attr}"
        if base in ("pytester", "testdir") and node.attr in PYTESTER_STARTERS:
            return f"{base}.{node.attr}"
    if isinstance(node, ast.ImportFrom) and node.module in STARTERS:
        started = [a.name for a in node.names if a.name in STARTERS[node.module]]
        return f"from {node.module} import {', '.join(started)}" if started else None
    return None


def _starting_definitions(path: Path) -> set[str]:
    """The top-level functions and classes of ``path`` (tests/helpers.py, tests/conftest.py) that start
    a program, themselves or through another one of the same file."""
    defs = {n.name: n for n in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    starting = {name for name, node in defs.items() if any(_names_a_starter(n) for n in ast.walk(node))}
    while True:
        more = {name for name, node in defs.items() if name not in starting
                and any(isinstance(n, ast.Name) and n.id in starting for n in ast.walk(node))}
        if not more:
            return starting
        starting |= more


def unit_file_problems(source: str, helpers: set[str], fixtures: set[str]) -> list[str]:
    """What in a unit test file's source starts a program, dials out or skips: one line each. A call, an
    import or a fixture, not a mere mention (``id(os.fork)``): the guard in conftest sees the rest."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        called = node.func if isinstance(node, ast.Call) else node if isinstance(node, ast.ImportFrom) else None
        if called is not None and (starter := _names_a_starter(called)) is not None:
            found.append(f"line {line}: {starter}")
        if isinstance(node, ast.ImportFrom) and node.module in ("helpers", "conftest"):
            found += [f"line {line}: {node.module}.{a.name} starts a program" for a in node.names
                      if a.name in helpers | fixtures]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [f"line {line}: {node.name} asks for the fixture {a.arg}, which starts a program"
                      for a in node.args.args if a.arg in fixtures]
        if isinstance(node, ast.Attribute) and ast.unparse(node) in SKIPS:
            found.append(f"line {line}: {ast.unparse(node)} (a unit test needs nothing it could skip for)")
    return found


def test_no_unit_test_file_starts_a_program_dials_out_or_skips():
    helpers, fixtures = _starting_definitions(TESTS / "helpers.py"), _starting_definitions(TESTS / "conftest.py")
    assert {"memgap", "run_recorded", "start_gunicorn", "build_c", "OwnFigures"} <= helpers, helpers
    assert {"witness_exe", "je_stats_exe", "rust_build", "wheel_venv"} <= fixtures, fixtures
    files = sorted((TESTS / "unit").glob("*.py"))
    assert len(files) >= 30 and Path(__file__).resolve() in files  # the rule reads every unit file
    problems = {f.name: found for f in files
                if (found := unit_file_problems(f.read_text(encoding="utf-8"), helpers, fixtures))}
    assert not problems, f"tests/unit starts nothing (move these tests to tests/live): {problems}"


def test_the_unit_rule_finds_each_kind_of_start():
    """The rule above, on a file that does each thing it refuses: it would not pass vacuously."""
    bad = (
        "import os, subprocess, pytest\nfrom subprocess import check_output\nfrom helpers import memgap, MiB\n"
        "def test_a(witness_exe, tmp_path):\n    subprocess.run(['true'])\n    os.fork()\n"
        "@pytest.mark.skipif(True, reason='no gcc')\ndef test_b(pytester):\n    pytester.runpytest_subprocess()\n"
        "    pytest.skip('gdb is not installed')\n"
    )
    found = unit_file_problems(bad, {"memgap"}, {"witness_exe"})
    assert sorted(found, key=lambda f: int(f.split()[1].rstrip(":"))) == [
        "line 2: from subprocess import check_output", "line 3: helpers.memgap starts a program",
        "line 4: test_a asks for the fixture witness_exe, which starts a program", "line 5: subprocess.run",
        "line 6: os.fork", "line 7: pytest.mark.skipif (a unit test needs nothing it could skip for)",
        "line 9: pytester.runpytest_subprocess", "line 10: pytest.skip (a unit test needs nothing it could skip for)"]
    assert unit_file_problems("import os\nstarts = {id(os.fork)}\n", set(), set()) == []  # named, not called
