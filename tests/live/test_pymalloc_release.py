"""Releasing pymalloc's empty pools: what it gives back, and that Python goes on unharmed."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import SRC, child_env

HAVE_CC = bool(__import__("shutil").which("cc") or __import__("shutil").which("gcc"))
pytestmark = pytest.mark.skipif(not HAVE_CC, reason="no C compiler to build the pool release")

# Builds a dict of small objects, frees most of them in a pattern that empties
# whole pools while every arena keeps a few live objects, releases, then checks
# every survivor and keeps allocating. Prints: released pools rss_drop.
SCRIPT = textwrap.dedent("""
    import gc, sys
    from memgap.inside.pymalloc_release import release_pymalloc
    data = {i: (str(i) * 3, float(i), [i, i + 1]) for i in range(300000)}
    for i in range(300000):
        if i % 4000 >= 40:  # whole runs freed: their pools empty, a few objects stay in each arena
            del data[i]
    gc.collect()
    r = release_pymalloc()
    assert all(v[0] == str(k) * 3 and v[1] == float(k) and v[2] == [k, k + 1] for k, v in data.items())
    more = [{"k": i, "v": str(i)} for i in range(200000)]  # reuses the released pools
    assert all(d["v"] == str(d["k"]) for d in more)
    assert all(v[0] == str(k) * 3 for k, v in data.items())
    print(r.released, r.pools, r.rss_before - r.rss_after)
""")


def _run(python, code=SCRIPT, **env):
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                          env=child_env(**env))


def test_release_gives_back_what_it_says_and_python_goes_on():
    proc = _run(sys.executable)
    assert proc.returncode == 0, proc.stderr
    released, pools, drop = map(int, proc.stdout.split())
    assert pools > 100 and released > 4 << 20, proc.stdout
    assert abs(drop - released) <= 256 << 10  # VmRSS fell by what the pages held (mincore)


# A burst of small objects, all freed: pymalloc unmaps the emptied arenas but
# keeps one (3.9+), its pools' pages still resident. Finds the wholly empty
# arenas by their pool headers (read through /proc/self/mem) and measures their
# pages after the header with mincore, before and after the release.
#
# Which arena pymalloc keeps, and how much of it the burst carved, the interpreter
# does not say: the newest arena, typically, with anything from 1 to 64 pools
# carved. The release confirms an arena with no live pool by at least 8 empty
# ones (WHOLE_ARENA_MIN in native/pools.c: a lone header-like pattern in memory
# that is not pymalloc's must never be released), so a kept arena of fewer pools
# stays as it is (11 runs in 100 here). The burst is therefore repeated, a little
# larger each time, until an arena of 8 pools or more is kept. And the first
# release_pymalloc() call of a process imports what it needs (828 KB of objects
# here), which pymalloc may take from that very arena when the others have no free
# pool: those pools are live when the release runs, and it rightly leaves them.
# So the release runs once before the burst, and the pools in use afterwards are
# left out of "after".
# Prints: pools resident_before resident_after live_after released.
EMPTY_ARENA_SCRIPT = textwrap.dedent("""
    import ctypes, gc, os, struct
    from memgap.inside.pymalloc_release import release_pymalloc
    from memgap.sources.pymalloc import capture_debugmallocstats, parse_debugmallocstats
    POOL = parse_debugmallocstats(capture_debugmallocstats()).pool_size
    PAGE = os.sysconf("SC_PAGE_SIZE")
    WHOLE_ARENA_MIN = 8
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    HEADER = struct.Struct("<IIQQQIIII")

    def headers():
        mem = os.open("/proc/self/mem", os.O_RDONLY)
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
        for line in lines:
            f = line.split()
            if f[1] != "rw-p" or f[4] != "0" or len(f) > 5:
                continue
            start, end = (int(x, 16) for x in f[0].split("-"))
            for p in range(-(-start // POOL) * POOL, end - POOL + 1, POOL):
                try:
                    count, _, _, _, _, index, szidx, nextoffset, maxnext = HEADER.unpack(os.pread(mem, 48, p))
                except (OSError, struct.error):
                    continue
                if szidx < 64 and maxnext == POOL - 16 * (szidx + 1) and 48 < nextoffset <= POOL:
                    yield p, index, count
        os.close(mem)

    def empty_arena_pools():
        by_arena = {}
        for p, index, count in headers():
            by_arena.setdefault(index, []).append((p, count))
        return [p for pools in by_arena.values() if len(pools) >= WHOLE_ARENA_MIN and all(c == 0 for _, c in pools)
                for p, _ in pools]

    def resident_after_header(pools):
        vec = ctypes.create_string_buffer(POOL // PAGE)
        total = 0
        for p in pools:
            assert libc.mincore(p + PAGE, POOL - PAGE, vec) == 0
            total += sum(b & 1 for b in vec.raw[:POOL // PAGE - 1]) * PAGE
        return total

    release_pymalloc()
    for attempt in range(8):
        burst = [[i, str(i)] for i in range(300000 + 7919 * attempt)]
        del burst
        gc.collect()
        pools = empty_arena_pools()
        if pools:
            break
    before = resident_after_header(pools)
    r = release_pymalloc()
    live = {p for p, _, count in headers() if count}
    print(len(pools), before, resident_after_header([p for p in pools if p not in live]),
          len(live.intersection(pools)), r.released)
""")


def test_release_includes_the_empty_arena_pymalloc_keeps():
    proc = _run(sys.executable, EMPTY_ARENA_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    pools, before, after, live, released = map(int, proc.stdout.split())
    # The kept arena's pools dirtied by the burst: 0.63-0.75 MiB over 120 runs here, depending on
    # how much of it the burst had carved (55 to 64 pools; the first burst was enough in all 120).
    assert pools >= 8 and before > 0, proc.stdout
    assert after == 0 and released >= before, proc.stdout
    assert live <= 2, proc.stdout  # measured 0: the release's own objects come from other arenas


def test_threads_allocating_meanwhile_are_unharmed():
    """Four threads build and check structures while the main thread releases again and again
    (10 releases: about 0.45 s each beside four busy threads, 1,900 rounds of churn among them;
    25 took 9 s of CPU for no other check)."""
    code = textwrap.dedent("""
        import threading, gc
        from memgap.inside.pymalloc_release import release_pymalloc
        stop, errors = threading.Event(), []
        def churn(seed):
            n = 0
            while not stop.is_set():
                items = {i: (str(i + seed), (i, seed)) for i in range(3000)}
                for i in range(0, 3000, 2):
                    del items[i]
                if any(v != (str(k + seed), (k, seed)) for k, v in items.items()):
                    errors.append(seed)
                n += 1
        threads = [threading.Thread(target=churn, args=(s,)) for s in range(4)]
        for t in threads: t.start()
        released = sum(release_pymalloc().pools for _ in range(10))
        stop.set()
        for t in threads: t.join()
        assert not errors, errors
        print(released)
    """)
    proc = _run(sys.executable, code)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 0


def test_pymalloc_off_is_unsupported():
    proc = _run(sys.executable, "from memgap.inside.pymalloc_release import release_pymalloc\n"
                                "from memgap.errors import Unsupported\n"
                                "try:\n    release_pymalloc()\nexcept Unsupported as e:\n    print('no:', e)\n",
                PYTHONMALLOC="malloc")
    assert proc.returncode == 0 and proc.stdout.startswith("no: pymalloc is not"), proc.stdout + proc.stderr


# The running interpreter always, and each other CPython pyenv has here (none on a stock Debian).
PYTHONS = [sys.executable] + sorted(p for v in ("3.10", "3.12", "3.13")
                                    for p in glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}")))


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: os.path.basename(p))
def test_release_on_every_cpython_found(python):
    """The pool header layout the C side reads, checked on each CPython version found."""
    src = SRC
    code = f"import sys; sys.path.insert(0, {src!r})\n" + SCRIPT
    proc = _run(python, code)
    if "No module named" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    released, pools, _ = map(int, proc.stdout.split())
    assert pools > 100 and released > 4 << 20, proc.stdout


def test_trim_with_pymalloc_and_through_the_environment():
    code = textwrap.dedent("""
        import gc, memgap
        data = {i: str(i) * 3 for i in range(300000)}
        for i in range(300000):
            if i % 4000 >= 40:
                del data[i]
        gc.collect()
        asked = memgap.trim()  # MEMGAP_PYMALLOC_RELEASE=1 in this process's environment
        print(asked.pymalloc_released, memgap.trim(pymalloc=False).pymalloc_released)
    """)
    proc = _run(sys.executable, code, MEMGAP_PYMALLOC_RELEASE="1")
    assert proc.returncode == 0, proc.stderr
    first, second = map(int, proc.stdout.split())
    assert first > 2 << 20 and second == 0, proc.stdout


ARENA_ALLOCATOR_C = r"""
#include <stdlib.h>
void *arena_alloc(void *ctx, size_t size) { (void)ctx; return malloc(size); }
void arena_free(void *ctx, void *ptr, size_t size) { (void)ctx; (void)size; free(ptr); }
"""


def test_a_foreign_arena_allocator_is_refused(tmp_path):
    """With arenas from malloc (PyObject_SetArenaAllocator), a freed arena's pool headers can stay
    in memory someone else owns now: the release refuses to run."""
    src, lib = tmp_path / "arenas.c", tmp_path / "arenas.so"
    src.write_text(ARENA_ALLOCATOR_C)
    subprocess.run([__import__("shutil").which("cc") or "gcc", "-shared", "-fPIC", "-o", str(lib), str(src)],
                   check=True)
    code = textwrap.dedent(f"""
        import ctypes, os
        from memgap.errors import Unsupported
        from memgap.inside.pymalloc_release import release_pymalloc
        lib = ctypes.CDLL({str(lib)!r})
        class Arenas(ctypes.Structure):
            _fields_ = [("ctx", ctypes.c_void_p), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]
        arenas = Arenas(None, ctypes.cast(lib.arena_alloc, ctypes.c_void_p),
                        ctypes.cast(lib.arena_free, ctypes.c_void_p))
        ctypes.pythonapi.PyObject_SetArenaAllocator(ctypes.byref(arenas))
        try:
            release_pymalloc()
        except Unsupported as e:
            print("no:", e, flush=True)
        os._exit(0)  # arenas from before the switch must not reach this free() at teardown
    """)
    proc = _run(sys.executable, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("no: pymalloc's arenas come from an allocator set with"), proc.stdout
