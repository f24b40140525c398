"""Releasing pymalloc's empty pools: what it gives back, and that Python goes on unharmed."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import child_env

HAVE_CC = bool(__import__("shutil").which("cc") or __import__("shutil").which("gcc"))
pytestmark = pytest.mark.skipif(not HAVE_CC, reason="no C compiler to build the pool release")

# Builds a dict of small objects, frees most of them in a pattern that empties
# whole pools while every arena keeps a few live objects, releases, then checks
# every survivor and keeps allocating. Prints: released pools rss_drop.
SCRIPT = textwrap.dedent("""
    import gc, sys
    from memgap.pymalloc_release import release_pymalloc
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


def test_threads_allocating_meanwhile_are_unharmed():
    """Four threads build and check structures while the main thread releases again and again."""
    code = textwrap.dedent("""
        import threading, gc
        from memgap.pymalloc_release import release_pymalloc
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
        released = sum(release_pymalloc().pools for _ in range(60))
        stop.set()
        for t in threads: t.join()
        assert not errors, errors
        print(released)
    """)
    proc = _run(sys.executable, code)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 0


def test_pymalloc_off_is_unsupported():
    proc = _run(sys.executable, "from memgap.pymalloc_release import release_pymalloc\n"
                                "from memgap.errors import Unsupported\n"
                                "try:\n    release_pymalloc()\nexcept Unsupported as e:\n    print('no:', e)\n",
                PYTHONMALLOC="malloc")
    assert proc.returncode == 0 and proc.stdout.startswith("no: pymalloc is not"), proc.stdout + proc.stderr


OTHER_PYTHONS = sorted(p for v in ("3.10", "3.12", "3.13")
                       for p in glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}")))


@pytest.mark.skipif(not OTHER_PYTHONS, reason="no other CPython versions here (pyenv)")
@pytest.mark.parametrize("python", OTHER_PYTHONS, ids=lambda p: os.path.basename(p))
def test_release_on_other_cpython_versions(python):
    """The pool header layout the C side reads, checked on each CPython it accepts."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    code = "import sys; sys.path.insert(0, %r)\n" % src + SCRIPT.replace("from memgap.pymalloc_release",
                                                                        "from memgap.pymalloc_release", 1)
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
