import _posixsubprocess
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

FIXTURES = os.path.join(HERE, "fixtures")
CAPTURES = sorted(
    p for p in glob.glob(os.path.join(FIXTURES, "**", "malloc_info.xml"), recursive=True)
)
CAPTURE_DIRS = [os.path.dirname(p) for p in CAPTURES]


def read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(params=CAPTURE_DIRS, ids=[os.path.basename(d) for d in CAPTURE_DIRS])
def capture(request):
    """A folder of outputs captured from one real process."""
    return request.param


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def witness_exe(tmp_path_factory):
    """programs/witness.c built: a C program that holds and frees what it is told, and says so."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc) to build programs/witness.c")
    exe = tmp_path_factory.mktemp("witness") / "witness"
    subprocess.run([cc, "-O1", "-pthread", "-o", str(exe), os.path.join(HERE, "programs", "witness.c")], check=True)
    return str(exe)


@pytest.fixture(scope="session")
def je_stats_exe(tmp_path_factory):
    """programs/je_stats.c built with Debian's libjemalloc.a linked in: a program whose malloc is
    jemalloc and that prints its own mallctl figures."""
    cc = shutil.which("gcc") or shutil.which("cc")
    archive = "/usr/lib/x86_64-linux-gnu/libjemalloc.a"
    if cc is None or not os.path.exists(archive):
        pytest.skip("needs gcc and libjemalloc-dev (libjemalloc.a)")
    exe = tmp_path_factory.mktemp("je_stats") / "je_stats"
    subprocess.run([cc, "-O1", "-o", str(exe), os.path.join(HERE, "programs", "je_stats.c"), archive,
                    "-lpthread", "-lm", "-ldl"], check=True)
    return str(exe)


@pytest.fixture(scope="session")
def je_prefixed_exe(tmp_path_factory):
    """programs/je_stats.c built with -DPREFIX=je_ and -rdynamic against Debian's libjemalloc_pic.a
    with its API renamed je_* (as Redis links jemalloc), then stripped; and the same built without
    -rdynamic (it exports nothing), stripped. Returns (exporting, exporting nothing).

    Why a renamed archive, not tikv-jemalloc-sys's ``_rjem_`` one: it needs no cargo, so the default
    run checks it. Why the renaming is sound, checked here on every build: every global symbol the
    archive defines outside jemalloc's own ``je_`` private namespace (its public API: malloc, free,
    mallctl..., the C++ operators) is renamed in every member, definitions and references alike
    (``objcopy --redefine-syms`` on the whole archive rewrites the symbol tables the relocations
    point into); none of the new names was taken, and no member still refers to an old one. What
    differs from a jemalloc configured with --with-jemalloc-prefix is its environment variable
    (MALLOC_CONF, not JE_MALLOC_CONF): this program sets its options in je_malloc_conf."""
    cc, objcopy, nm = shutil.which("gcc") or shutil.which("cc"), shutil.which("objcopy"), shutil.which("nm")
    archive = "/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a"
    if cc is None or objcopy is None or nm is None or not os.path.exists(archive):
        pytest.skip("needs gcc, binutils (objcopy, nm) and libjemalloc-dev (libjemalloc_pic.a)")
    where = tmp_path_factory.mktemp("je_prefixed")

    def symbols(path, *flags):
        out = subprocess.run([nm, *flags, path], capture_output=True, text=True, check=True).stdout
        return {line.split()[-1] for line in out.splitlines() if line.strip() and not line.endswith(":")}
    public = {s for s in symbols(archive, "-g", "--defined-only") if not s.startswith(("je_", "DW.ref."))}
    assert {"malloc", "free", "mallctl", "malloc_conf"} <= public, sorted(public)
    assert not {"je_" + s for s in public} & symbols(archive), "a je_ name is taken already"
    (where / "map").write_text("".join(f"{s} je_{s}\n" for s in sorted(public)))
    renamed = str(where / "libjemalloc_je.a")
    subprocess.run([objcopy, f"--redefine-syms={where / 'map'}", archive, renamed], check=True)
    assert not public & (symbols(renamed, "-g", "--defined-only") | symbols(renamed, "-u")), "an old name is left"
    built = []
    for name, flags in (("je_prefixed", ["-rdynamic"]), ("je_prefixed_nodyn", [])):
        exe = str(where / name)
        subprocess.run([cc, "-O1", "-DPREFIX=je_", *flags, "-o", exe, os.path.join(HERE, "programs", "je_stats.c"),
                        renamed, "-lpthread", "-lm", "-ldl"], check=True)
        subprocess.run(["strip", exe], check=True)
        built.append(exe)
    return tuple(built)


@pytest.fixture(scope="session")
def rust_build():
    """tests/programs/rjem built with cargo (tikv-jemallocator from crates.io, jemalloc under the ``_rjem_``
    prefix, with its statistics): the folder of the program ``rjem`` and the library ``librjem.so``. Its
    target folder stays, so that only the first build compiles jemalloc (scripts/setup.sh runs it)."""
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.path.exists(cargo):
        pytest.skip("no cargo to build programs/rjem")
    rust = os.path.join(HERE, "programs", "rjem")
    built = subprocess.run([cargo, "build", "--release", "--locked", "--quiet"], cwd=rust, capture_output=True,
                           text=True, timeout=1200)
    if built.returncode != 0:
        pytest.skip(f"cargo could not build programs/rjem (crates.io unreachable?): {built.stderr[-500:]}")
    return os.path.join(rust, "target", "release")


@pytest.fixture(scope="session")
def own_stats_exe(tmp_path_factory):
    """own_stats_exe(kind): programs/own_stats.c built for "tcmalloc" (Debian's libtcmalloc_minimal.so.4),
    "mimalloc" (libmimalloc.so.2) or "tcmalloc-static" (libtcmalloc_minimal.a linked in): a program that
    holds and frees known amounts and prints its allocator's own figures."""
    cc = shutil.which("gcc") or shutil.which("cc")
    lib = "/usr/lib/x86_64-linux-gnu/"
    needs = {"tcmalloc": (lib + "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
             "mimalloc": (lib + "libmimalloc.so.2", "libmimalloc2.0"),
             "tcmalloc-static": (lib + "libtcmalloc_minimal.a", "libgoogle-perftools-dev")}
    where = tmp_path_factory.mktemp("own_stats")
    built = {}

    def build(kind):
        path, package = needs[kind]
        if cc is None or not os.path.exists(path):
            pytest.skip(f"needs gcc and {package} ({path})")
        if kind not in built:
            exe = str(where / kind)
            define = "-DMIMALLOC" if kind == "mimalloc" else "-DTCMALLOC"
            # tcmalloc is C++: linked in, it needs the C++ runtime (the library itself, not its dev package)
            link = [path, "-l:libstdc++.so.6", "-lpthread", "-lm"] if kind.endswith("static") \
                else [f"-l:{os.path.basename(path)}"]
            subprocess.run([cc, "-O1", define, "-o", exe, os.path.join(HERE, "programs", "own_stats.c"), *link],
                           check=True)
            built[kind] = exe
        return built[kind]
    return build


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory):
    """A new virtual environment with memgap installed from a wheel built from this tree
    (not editable: as users install it), and uvicorn for the server tests."""
    import subprocess

    root = os.path.dirname(HERE)
    where = tmp_path_factory.mktemp("wheel")
    # built with the suite's own setuptools and wheel (an isolated build installs them anew: 3.5 s more),
    # one build at a time: each xdist worker that runs a test of a wheel builds its own, and two at once
    # share the tree's build/ folder (test_remedy_ships beside test_lab_bursty: CalledProcessError, once)
    import fcntl

    with open(tmp_path_factory.getbasetemp().parent / "wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(where), root], check=True, capture_output=True)
    wheel = next(str(p) for p in where.iterdir() if p.suffix == ".whl")
    venv = where / "venv"
    # no pip of its own (ensurepip took 9 s of the fixture's 15): the suite's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # without PYTHONPATH: a src/ on it (tests run from a checkout) holds memgap.egg-info, and pip
    # then takes memgap as installed already and leaves the venv without it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", wheel,
                    "uvicorn"], check=True, capture_output=True, env=env)
    return venv


# --- --no-skips: a green run means every test ran ---------------------------------------------

def pytest_addoption(parser):
    parser.addoption("--no-skips", action="store_true",
                     help="fail the run if any test skips (scripts/test.sh, and so CI, passes it): "
                          "a skip there means setup missed something a feature needs")
    parser.addoption("--cargo", action="store_true",
                     help="also run the tests marked cargo, which build a Rust program with crates from "
                          "crates.io (the first build compiles jemalloc: minutes on 2 cores)")


def pytest_configure(config):
    config.addinivalue_line("markers", "cargo: builds a Rust program with cargo; left out unless --cargo")


# --- tests/unit starts nothing: a guard around each of its tests ---------------------------------
# The fast lane (scripts/test.sh --fast) runs tests/unit alone, with no setup beyond the venv: a test
# there that starts a program, or opens an IP socket, would need what setup installs and fail (or
# pass vacuously) elsewhere. While a unit test's setup, call or teardown runs, the ways Python starts
# a process and opens an IP socket fail it, naming what was asked; a live test, in tests/live, is left alone.
# tests/unit/test_unit_guard.py checks the guard itself, test_house.py the unit files' source.
UNIT = os.path.join(HERE, "unit")
# (module, function): subprocess holds its own name for fork_exec since Python 3.11; multiprocessing's
# spawn and forkserver call _posixsubprocess's; os.popen goes through subprocess, os.spawn* through os.fork
_STARTS = [(m, name) for m, name in ((subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), *(
    (os, f) for f in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve")))
    if getattr(m, name, None) is not None]
_NETWORK = ("connect", "connect_ex", "bind", "sendto")


def _refused(what, tried):
    def refuse(*args, **kwargs):
        tried.append(what)
        pytest.fail(f"a unit test {what}: tests/unit is for tests that start no process and use no network "
                    "(move it to tests/live, where scripts/test.sh's setup gives it what it needs)")
    return refuse


def _refused_socket(method, tried):
    original = getattr(socket.socket, method)

    def guarded(sock, *args, **kwargs):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _refused(f"opened an IP socket ({method} {args[:1]})", tried)()
        return original(sock, *args, **kwargs)
    return guarded


@contextlib.contextmanager
def _starting_nothing(item):
    """Within tests/unit: starting a process or using an IP socket fails the test."""
    if not str(item.path).startswith(UNIT + os.sep):
        yield []
        return
    tried = []
    with pytest.MonkeyPatch.context() as patch:
        for module, name in _STARTS:
            patch.setattr(module, name, _refused(f"started a process ({module.__name__}.{name})", tried))
        for method in _NETWORK:
            patch.setattr(socket.socket, method, _refused_socket(method, tried))
        yield tried


def _guarded(item):
    with _starting_nothing(item) as tried:
        result = yield
    if tried:  # refused, and the refusal caught by the code under test: the test fails all the same
        pytest.fail(f"a unit test tried what tests/unit refuses: {'; '.join(tried)}")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None:  # the session's end: the session fixtures of live tests are torn down here too
        return (yield)
    return (yield from _guarded(item))


# The files that take longest (seconds on the 2-core machine, four workers), handed out first: with
# --dist loadfile a worker takes a whole file, and one that starts a long file near the end runs on
# alone (the lab and the unmodified-program files, 93 and 73 s, ended a run 40 s after the others).
LONGEST_FIRST = ("test_lab.py", "test_unmodified.py", "test_scenarios.py", "test_explain.py",
                 "test_allocator_detect.py", "test_remedy_ships.py", "test_cli.py", "test_jemalloc_deep.py",
                 "test_widths.py", "test_pytest_plugin.py", "test_commands.py", "test_gunicorn_lab.py")


def _longest_first(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    if config.getoption("--cargo"):
        return
    left_out = [item for item in items if item.get_closest_marker("cargo")]
    if left_out:  # deselected, said in the summary: not a skip that hides a missing install
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("cargo")]
        config._memgap_cargo_left_out = len(left_out)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left_out = getattr(config, "_memgap_cargo_left_out", 0)
    if left_out:
        terminalreporter.write_line(f"{left_out} test(s) that build a Rust program with cargo left out: "
                                    "pytest --cargo runs them")
    skipped = terminalreporter.stats.get("skipped", [])
    if config.getoption("--no-skips") and skipped:
        terminalreporter.write_line(f"--no-skips: {len(skipped)} test(s) skipped, so the run fails "
                                    "(the reasons are listed above; tests/README.md says what each needs)",
                                    red=True, bold=True)


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if (session.config.getoption("--no-skips") and reporter is not None
            and reporter.stats.get("skipped") and exitstatus == 0):
        session.exitstatus = 1
