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
- no import cycle in src/, and the renderers only render: ``memgap.report.*`` imports the documents,
  the report, the errors, the standard library and rich, nothing that computes;
- the root of src/memgap holds at most ROOT_MODULES modules (the rest lives in the pipeline's folders);
- the floors: ``memgap inspect PID``'s request goes from the command down the pipeline to the
  rendered table without climbing back to a floor it has left (``FLOORS``, below).

The import graph counts every import: at the top of a module, inside a function, under
``TYPE_CHECKING`` (a module that imports another only to show itself depends on it all the same).
Importing ``pkg.mod`` from outside ``pkg`` also runs ``pkg/__init__.py``: that counts as an import of
``pkg`` where its ``__init__`` has code (more than a docstring), and not where it has none. The root
package ``memgap`` holds every module, so none imports it that way: only by name (``import memgap``).
Imports made at run time by name (``importlib.import_module``: the runtimes' registry, the commands)
are not in the graph. ``scripts/import_walk.py`` prints the walk for a human.
"""
from __future__ import annotations

import ast
import sys
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
    # the agent's reply is a wire format: its sections are named by allocator (agent.c writes them)
    "memgap.agent.reply": 2,
    # the machine's C library version, a key of the run's machine record (docs/json.md): written, not branched on
    "memgap.record.recorder": 1,
}


def _names_an_allocator(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in ALLOCATOR_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_allocator(e) for e in node.elts)
    return False


def _branches_on_an_allocator(node: ast.AST) -> bool:
    """A comparison with an allocator's name, a dict keyed by one, or a ``match`` case on one."""
    if isinstance(node, ast.Compare):
        return any(map(_names_an_allocator, [node.left, *node.comparators]))
    if isinstance(node, ast.Dict):
        return any(k is not None and _names_an_allocator(k) for k in node.keys)
    return isinstance(node, ast.MatchValue) and _names_an_allocator(node.value)


def test_the_allocator_rule_sees_each_kind_of_branch():
    """The rule above on code that branches each way it names, and on display text, which it leaves."""
    code = ("x == 'jemalloc'\nname in ('glibc', 'musl')\nTABLE = {'tcmalloc': 1}\n"
            "match name:\n    case 'mimalloc':\n        pass\nprint('glibc')\nf(allocator='glibc')\n")
    hits = [n.lineno for n in ast.walk(ast.parse(code)) if _branches_on_an_allocator(n)]
    assert sorted(hits) == [1, 2, 3, 5]


def test_no_branch_on_an_allocators_name_outside_its_reader():
    """A comparison (``==``, ``!=``, ``in``) with a string naming an allocator, outside memgap.allocators
    (each allocator's reader, the registry, the lab's catalogue and variants): the pipeline asks the
    reader (memgap.allocators.registry.reader_for) instead. A table keyed by allocators' names (a dict's
    key, a ``match`` case) is such a branch too; display text is none."""
    found: dict[str, list[str]] = {}
    for name, (path, tree) in _modules().items():
        if name == "memgap.allocators" or name.startswith("memgap.allocators."):
            continue
        for node in ast.walk(tree):
            if _branches_on_an_allocator(node):
                found.setdefault(name, []).append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:80]}")
    counts = {name: len(lines) for name, lines in found.items()}
    wrong = {n: found[n] for n in found if counts[n] != NAME_COMPARISONS_ALLOWED.get(n)}
    assert counts == NAME_COMPARISONS_ALLOWED, wrong


# --- the import graph --------------------------------------------------------------------------

def _has_code(tree: ast.Module) -> bool:
    """More than a docstring and ``from __future__`` imports: importing the package runs something."""
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               and not (isinstance(node, ast.ImportFrom) and node.module == "__future__") for node in tree.body)


PACKAGES_WITH_CODE = {name for name, (path, tree) in MODULES.items()
                      if path.name == "__init__.py" and name != "memgap" and _has_code(tree)}


def _packages_run(importer: str, module: str) -> list[str]:
    """The packages whose ``__init__`` (with code) importing ``module`` runs, ``importer`` outside them."""
    parts = module.split(".")
    found = []
    for n in range(2, len(parts)):
        package = ".".join(parts[:n])
        if package in PACKAGES_WITH_CODE and not _within(importer, (package,)):
            found.append(package)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {module it imports: line}} for every module of src/memgap, every import counted (the
    module docstring says how)."""
    graph: dict[str, dict[str, int]] = {}
    for name in MODULES:
        edges: dict[str, int] = {}
        for module, _, line in _imports(name):
            if module in MODULES and module != name:
                for target in (*_packages_run(name, module), module):
                    edges.setdefault(target, line)
        edges.pop(name, None)
        graph[name] = edges
    return graph


GRAPH = import_graph()


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_counts_every_kind_of_import():
    """A function-level import (inspect's --deep renderers), a TYPE_CHECKING one (inspect's GdbOptions),
    an ``import memgap.x`` and a package ``__init__`` run on the way (the agent's) are all edges."""
    assert "memgap.report.attach" in GRAPH["memgap.cli.inspect"]
    assert "memgap.sources.gdb_options" in GRAPH["memgap.cli.inspect"]
    assert "memgap.agent" in GRAPH["memgap.explain.snapshot"]  # explain.snapshot imports memgap.agent.client
    assert "memgap.agent" in PACKAGES_WITH_CODE and "memgap.report" not in PACKAGES_WITH_CODE
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_src():
    found = cycles(GRAPH)
    assert not found, f"import cycles (a module below imports one above it): {found}"


def test_no_import_cycle_between_memgap_and_its_pytest_plugin():
    """src/memgap_pytest imports memgap; nothing of memgap imports it back."""
    back = [f"{name} line {line}" for name in MODULES for module, _, line in _imports(name)
            if module == "memgap_pytest" or module.startswith("memgap_pytest.")]
    assert (SRC / "memgap_pytest" / "__init__.py").exists() and not back, back


# The renderers take documents and a stream: they import the documents, each other (units, fit),
# the errors, the standard library and rich; nothing that reads or computes.
REPORT_MAY_IMPORT = ("memgap.documents", "memgap.report", "memgap.errors")
REPORT_MAY_IMPORT_OUTSIDE = frozenset(sys.stdlib_module_names) | {"rich"}


def test_the_renderers_import_only_documents_and_each_other():
    crossed: set[str] = set()
    for name in MODULES:
        if not _within(name, ("memgap.report",)):
            continue
        for module, _, line in _imports(name):
            top = module.split(".")[0]
            allowed = _within(module, REPORT_MAY_IMPORT) if top == "memgap" else top in REPORT_MAY_IMPORT_OUTSIDE
            if not allowed:
                crossed.add(f"{name} line {line}: {module}")
    assert not crossed, f"a renderer imports only {REPORT_MAY_IMPORT}, the standard library and rich: " \
                        f"{sorted(crossed)}"


ROOT_MODULES = 8


def test_the_root_holds_at_most_8_modules():
    root = sorted(p.name for p in (SRC / "memgap").glob("*.py"))
    assert len(root) <= ROOT_MODULES, f"src/memgap/ holds {len(root)} modules: put new ones in a folder: {root}"


# The floors of the pipeline, read from the command down. A request enters at the command (7), which
# reads the process (explain, inside: 5); the reading diagnoses what it read (4) with what the
# readers gave (runtimes, the agent, the allocators' catalogue: 3; sources of truth: 2); the command
# then hands the documents to a renderer (1), the last floor, just above the ground (0: the documents,
# the errors, the units and the environment's names, which every floor uses). An import goes to its
# own floor or below; one to a higher floor is the request climbing back to a floor it has left (a
# renderer computing findings, a document importing its renderer, a reader calling the public API).
# The floors the inspect walk never reaches (record, lab, ...) are placed all the same, where their
# imports put them, so that every module has one.
GROUND = ("memgap.errors", "memgap.documents", "memgap.report.units", "memgap.record.envnames")
FLOORS = {
    "memgap.report": 1,
    "memgap.sources": 2, "memgap.native": 2,
    "memgap.runtimes": 3, "memgap.agent": 3, "memgap.allocators": 3,
    "memgap.diagnose": 4,
    "memgap.explain": 5, "memgap.inside": 5,
    "memgap.record": 6, "memgap.lab": 6, "memgap.metrics": 6, "memgap.remedies": 6, "memgap.api": 6,
    "memgap.cli": 7, "memgap.web": 7, "memgap.prometheus": 7, "memgap._hook": 7, "memgap._bootstrap": 7,
    "memgap.scenarios": 7, "memgap.__main__": 7, "memgap": 7,
}
INSPECT = "memgap.cli.inspect"


def floor(module: str) -> int:
    """A module's floor: 0 on the ground, else its package's (the longest name in FLOORS it is within)."""
    if _within(module, GROUND):
        return 0
    return max(((len(p), f) for p, f in FLOORS.items() if _within(module, (p,))), default=(0, -1))[1]


def walk(start: str = INSPECT) -> list[tuple[str, str, int]]:
    """Every import edge (importer, imported, line) reachable from ``start``, breadth first."""
    seen, queue, edges = {start}, [start], []
    while queue:
        module = queue.pop(0)
        for target, line in sorted(GRAPH[module].items()):
            edges.append((module, target, line))
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return edges


def climbs(edges: list[tuple[str, str, int]]) -> list[str]:
    return [f"{a} (floor {floor(a)}) line {line} -> {b} (floor {floor(b)})" for a, b, line in edges
            if floor(b) > floor(a)]


def test_every_module_has_a_floor():
    assert not [name for name in MODULES if floor(name) < 0]


def test_the_inspect_walk_goes_down_to_the_rendered_table():
    edges = walk()
    reached = {b for _, b, _ in edges}
    # the walk reaches the stages the request passes: the reading, the findings, the documents, the table
    assert {"memgap.explain.snapshot", "memgap.diagnose.findings", "memgap.documents.snapshot",
            "memgap.report.terminal", "memgap.report.attach", "memgap.inside.gdb"} <= reached
    found = climbs(edges)
    assert not found, "memgap inspect's request climbs back to a floor it has left:\n" + "\n".join(found)


def test_no_module_climbs():
    """The floors hold everywhere, not only on inspect's walk (top, run, the lab and the API too)."""
    found = climbs([(a, b, line) for a, targets in GRAPH.items() for b, line in targets.items()])
    assert not found, "imports to a higher floor:\n" + "\n".join(found)


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


def test_no_two_test_files_share_a_name():
    """tests/unit and tests/live are not packages: pytest imports each test file by its base name, so two
    of one name fail the whole run's collection ("import file mismatch"), which the fast lane, reading
    tests/unit alone, never sees (a fresh clone's full run did, once)."""
    seen: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert len(seen) >= 60
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
