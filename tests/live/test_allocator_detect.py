"""Every allocator in a real process, found from outside (issue 12): which one serves malloc,
in which object, under which prefix, and how memgap knows, read from the ELF symbol tables
of the program and of each object in its maps.

The programs: Debian's redis-server (libjemalloc.so.2 linked), a C program with
libjemalloc.a linked in and stripped, the same program under tcmalloc and mimalloc (linked
and preloaded) and under plain glibc, and, where cargo can fetch tikv-jemallocator, a Rust
program and a Rust library loaded with dlopen() whose heaps are a jemalloc under the
``_rjem_`` prefix beside glibc's malloc (as Rust services and Polars ship); its figures are
checked against the program's own in test_jemalloc_deep.
"""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import HERE, child_env
from helpers import JEMALLOC, MiB, memgap

LIB = "/usr/lib/x86_64-linux-gnu"
TCMALLOC = f"{LIB}/libtcmalloc_minimal.so.4"
MIMALLOC = f"{LIB}/libmimalloc.so.2"
JEMALLOC_A = f"{LIB}/libjemalloc.a"
CC = shutil.which("gcc") or shutil.which("cc")
PROGRAMS = os.path.join(HERE, "programs")


def _need(path, package):
    if not os.path.exists(path):
        pytest.skip(f"{package} is not installed ({path})")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """build(name, *link_args): programs/alloc_hold.c built into a temporary folder."""
    if CC is None:
        pytest.skip("no C compiler (gcc)")
    where = tmp_path_factory.mktemp("alloc")

    def make(name, *args):
        exe = str(where / name)
        subprocess.run([CC, "-O1", "-o", exe, os.path.join(PROGRAMS, "alloc_hold.c"), *args, "-ldl"], check=True)
        return exe
    return make


class Held:
    """alloc_hold (or another program printing "ready", after lines of its own) running until the test
    closes its stdin."""

    def __init__(self, cmd, **env):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env})
        for line in self.proc.stdout:
            if line.startswith("ready"):
                break
        else:
            raise AssertionError((cmd, "no ready", self.proc.poll()))

    def inspect(self):
        """``memgap inspect PID --json -``'s allocator, and the same command's table."""
        out = memgap("inspect", str(self.proc.pid), "--json", "-")
        assert out.returncode == 0, out.stderr[-2000:]
        text = memgap("inspect", str(self.proc.pid))
        assert text.returncode == 0, text.stderr[-2000:]
        return json.loads(out.stdout), text.stdout

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def _inspected(cmd, **env):
    held = Held(cmd, **env)
    try:
        return held.inspect()
    finally:
        held.close()


def _serving(doc):
    alloc = doc["allocator"]
    serving = [f for f in alloc["found"] if f["serves_malloc"]]
    assert len(serving) == 1 and alloc["found"][0] == serving[0], alloc
    assert (alloc["name"], alloc["library"]) == (serving[0]["name"], serving[0]["library"])
    return serving[0]


@pytest.mark.parametrize("case", ["glibc", "jemalloc-static", "jemalloc-static-stripped", "tcmalloc-linked",
                                  "mimalloc-linked", "jemalloc-preloaded", "tcmalloc-preloaded",
                                  "mimalloc-preloaded"])
def test_the_allocator_serving_malloc_is_named_with_its_object(build, case):
    """Linked in statically (stripped or not), linked as a library, or preloaded: the right allocator,
    in the right object, and the how says which route told."""
    env = {}
    if case == "glibc":
        exe, name, where, how = build("plain"), "glibc", "libc.so.6", "lookup order"
    elif case.startswith("jemalloc-static"):
        _need(JEMALLOC_A, "libjemalloc-dev")
        exe = build(case, JEMALLOC_A, "-lpthread", "-lm")
        if case.endswith("stripped"):
            subprocess.run(["strip", exe], check=True)
            how = "jemalloc's own messages are in its .rodata"
        else:
            how = "defines mallctl"
        name, where = "jemalloc", os.path.basename(exe)
    elif case.endswith("-linked"):
        name = case.split("-")[0]
        lib = TCMALLOC if name == "tcmalloc" else MIMALLOC
        _need(lib, f"the {name} library")
        exe, where, how = build(case, f"-l:{os.path.basename(lib)}"), os.path.basename(lib), "lookup order"
    else:
        name = case.split("-")[0]
        lib = {"jemalloc": JEMALLOC, "tcmalloc": TCMALLOC, "mimalloc": MIMALLOC}[name]
        _need(lib, f"the {name} library")
        exe, where, how, env = build("plain"), os.path.basename(lib), "preloaded (LD_PRELOAD)", {"LD_PRELOAD": lib}
    doc, text = _inspected([exe], **env)
    serving = _serving(doc)
    assert serving["name"] == name, doc["allocator"]
    # the object as mapped: a library's real file (libmimalloc.so.2 is a link to libmimalloc.so.2.0)
    assert os.path.basename(serving["library"]).startswith(where), serving
    assert how in serving["how"], serving
    if case == "jemalloc-static":
        assert "the program itself defines malloc" in serving["how"]
    assert f"- malloc: {name} in {serving['library']}" in " ".join(text.split())
    assert f"allocator {name})" in text
    if name != "glibc":  # nothing walked as if glibc's: the allocator layers say what would read them
        for layer in ("allocator_in_use", "allocator_free"):
            assert doc["layers"][layer]["resident"] is None
            assert f"{name} serves malloc" in doc["layers"][layer]["note"]
        assert not doc["layers"]["allocator_free"]["detail"].get("arenas")


def test_debian_redis_server_runs_jemalloc_from_its_library(tmp_path):
    """Debian's redis-server links libjemalloc.so.2 (DT_NEEDED, before libc) and imports mallctl."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
                             "--daemonize", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        out = memgap("inspect", str(proc.pid), "--json", "-")
        assert out.returncode == 0, out.stderr[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    doc = json.loads(out.stdout)
    serving = _serving(doc)
    assert serving["name"] == "jemalloc" and os.path.basename(serving["library"]) == "libjemalloc.so.2", serving
    assert "lookup order" in serving["how"] and "mallctl" in serving["how"]
    assert doc["allocator"]["others"] == []
    assert "agent" in doc["layers"]["allocator_free"]["note"]


@pytest.mark.cargo  # left out unless --cargo: the first build compiles jemalloc for minutes
@pytest.mark.parametrize("stripped", [False, True], ids=["symbols", "stripped"])
@pytest.mark.parametrize("shape", ["program", "dlopened-library"])
def test_a_prefixed_jemalloc_beside_glibc(build, rust_build, tmp_path, shape, stripped):
    """tikv-jemallocator's jemalloc (``_rjem_``) in a Rust program, or in a Rust library a C program
    dlopen()s: glibc still serves malloc, and the jemalloc is named beside it, in its object."""
    built = os.path.join(rust_build, "rjem" if shape == "program" else "librjem.so")
    obj = str(tmp_path / os.path.basename(built))
    shutil.copy(built, obj)
    if stripped:
        subprocess.run(["strip", obj], check=True)
    cmd = [obj] if shape == "program" else [build("host"), obj]
    held = Held(cmd)
    try:
        doc, text = held.inspect()
        deep = memgap("inspect", str(held.proc.pid), "--deep", "--json", "-")
        trim = memgap("inspect", str(held.proc.pid), "--trim", "--json", "-")
    finally:
        held.close()
    assert _serving(doc)["name"] == "glibc"
    beside = [f for f in doc["allocator"]["found"] if not f["serves_malloc"]]
    assert [(f["name"], f["library"]) for f in beside] == [("jemalloc", obj)], doc["allocator"]
    assert beside[0]["prefix"] == ("?" if stripped else "_rjem_")
    assert ("own messages" if stripped else "_rjem_mallctl") in beside[0]["how"]
    assert doc["allocator"]["others"] == ["jemalloc"]
    # glibc's heaps are still walked; the jemalloc's memory is said to be under other anonymous
    assert doc["layers"]["allocator_free"]["resident"] is not None
    assert "jemalloc" in doc["layers"]["other_anon"]["note"]
    flat = " ".join(text.split())
    assert f"- beside: jemalloc ({'symbols stripped' if stripped else 'prefix _rjem_'}) in {obj}" in flat
    assert "another allocator beside glibc" in flat
    # --deep: gdb calls _rjem_mallctl where a symbol table keeps it (not in a stripped one: a Rust binary
    # exports nothing in .dynsym); programs/rjem builds jemalloc with its statistics (tikv-jemallocator's
    # "stats"), so there they are read beside glibc's figures (test_jemalloc_deep checks them against the
    # program's own)
    assert deep.returncode == 0, deep.stderr[-2000:]
    inside = json.loads(deep.stdout)["deep"]
    assert inside["malloc_info"] is not None, inside
    if stripped:
        assert inside["jemalloc"] is None, inside
        assert any("jemalloc beside glibc's malloc not read" in n for n in inside["notes"]), inside["notes"]
    else:
        j = inside["jemalloc"]
        assert j["symbol"] == "_rjem_mallctl" and inside["jemalloc_beside"].startswith("jemalloc (_rjem_)"), inside
        assert j["allocated"] >= 4 * MiB and j["resident"] >= j["active"] >= j["allocated"], j  # the 4 MiB it holds
    # --trim: glibc's malloc_trim, then (where its mallctl can be called) the jemalloc's purge, its
    # estimate read just before: each measured by VmRSS around it
    assert trim.returncode == 0, trim.stderr[-2000:]
    done = json.loads(trim.stdout)["after_trim"]["trim"]
    assert done["performed"] and ("parts" in done) == (not stripped), done
    if not stripped:
        assert done["parts"]["jemalloc"]["call"] == '_rjem_mallctl("arena.4096.purge")', done["parts"]
        assert done["parts"]["jemalloc"]["returned"] == 0 and done["parts"]["jemalloc"]["estimate"] is not None


def test_a_second_look_reads_the_libraries_from_memgaps_cache(build, tmp_path):
    """What a look read of a library is kept in memgap's private folder (under TMPDIR, empty at first):
    another memgap process's look takes it from there, and reads the library again once it changes.
    Shown with a library of the test's own that a Python program loads: its kept facts are rewritten
    (as if it defined jemalloc's API under je_), the second look names that jemalloc, which the file
    cannot have told it; once the file's mtime moves, the third look reads the file and names none."""
    import sys

    lib = tmp_path / "libprobe.so"
    (tmp_path / "probe.c").write_text("int probe(void) { return 1; }\n")
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "probe.c")], check=True)
    fresh = tmp_path / "tmp"
    fresh.mkdir()
    env = child_env(TMPDIR=str(fresh))
    held = Held([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('ready', flush=True); "
                 "sys.stdin.read()", str(lib)])

    def look():
        out = memgap("inspect", str(held.proc.pid), "--json", "-", env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        return [(f["name"], f["library"], f["prefix"]) for f in json.loads(out.stdout)["allocator"]["found"]]

    try:
        first = look()
        st = os.stat(lib)
        (entry,) = (fresh / f"memgap-elf-{os.getuid()}").glob(f"{st.st_dev:x}-{st.st_ino:x}-*.json")
        kept = json.loads(entry.read_text())
        assert kept["file"] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        assert kept["facts"]["defined"] == [] and (str(lib), "") not in [f[1:] for f in first]
        kept["facts"]["defined"] = kept["facts"]["exported"] = ["je_mallctl", "je_mallocx"]
        entry.write_text(json.dumps(kept))
        assert ("jemalloc", str(lib), "je_") in look()   # from the kept facts: the file defines no je_*
        os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # the same file, changed: read again
        assert look() == first
        assert json.loads(entry.read_text())["facts"]["defined"] == []
    finally:
        held.close()


def test_in_process_detection_asks_dladdr():
    """memgap inside a process: dladdr names the object malloc resolves to (no symbol tables read there)."""
    import sys

    from conftest import child_env

    code = ("import json\nfrom memgap.allocators.detect import detect_in_process\n"
            "from memgap.sources.procfs import ProcReader\n"
            "d = detect_in_process(ProcReader('self').maps())\n"
            "print(json.dumps([d.name, d.library, d.how, [f.to_dict() for f in d.found]]))\n")
    for preload, name in ((None, "glibc"), (JEMALLOC, "jemalloc")):
        if preload and not os.path.exists(preload):
            continue
        env = child_env(**({"LD_PRELOAD": preload} if preload else {}))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        got, library, how, found = json.loads(out.stdout)
        assert got == name and "dladdr" in how, (got, how)
        assert found[0] == {"name": name, "library": library, "prefix": "", "how": how, "serves_malloc": True,
                            "exported": False}
