"""Remedies as code, on real processes and real allocators (the environment they set, worked out
without a process: tests/unit/test_remedy_env.py)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import child_env
from helpers import JEMALLOC
from memgap.allocators.catalog import find_library, preloaded
from memgap.record.recorder import BOOTSTRAP_DIR
from memgap.remedies import preload_env, spawn_env, verify_env

BURST_THEN_QUIET = r"""
import json, os, sys, time
import memgap
def rss():
    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) << 10
blocks = [bytearray(100_000) for _ in range(1500)]   # ~150 MiB in glibc's heap (under the mmap threshold)
del blocks[:-1]                                      # the last one pins the top: free() cannot shrink the heap
before = rss()
if os.environ.get("START_TRIMMER"):
    trimmer = memgap.Trimmer(interval=0.1, quiet=0.3, min_free=4 << 20, min_gap=1.0).start()
time.sleep(float(os.environ.get("WAIT", "1.5")))
after = rss()
stats = trimmer.stats.__dict__ if os.environ.get("START_TRIMMER") else None
print(json.dumps({"before": before, "after": after, "stats": stats}))
"""


def _burst(**env):
    out = subprocess.run([sys.executable, "-c", BURST_THEN_QUIET], env=child_env(**env),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_trimmer_gives_back_what_a_quiet_process_holds():
    untouched = _burst()
    trimmed = _burst(START_TRIMMER="1", WAIT="2.5")
    assert untouched["after"] > 100 << 20, "glibc kept the freed burst"  # the problem
    assert trimmed["stats"]["trims"] >= 1
    assert trimmed["after"] < untouched["after"] - (80 << 20)
    assert trimmed["stats"]["released"] >= 80 << 20
    assert trimmed["stats"]["trims"] == 1  # one burst, one trim: quiet afterwards, no more


def test_trimmer_from_the_bootstrap_on_an_unmodified_program():
    env = {"MEMGAP_TRIMMER": "1", "PYTHONPATH": BOOTSTRAP_DIR + os.pathsep + child_env()["PYTHONPATH"],
           "WAIT": "4"}
    trimmed = _burst(**env)
    assert trimmed["after"] < 60 << 20, trimmed


SMALL_OBJECT_BURST = r"""
import json, time
import memgap
trims = []
keep = [None] * 400_000                      # the list's array, from glibc, before the trimmer starts
ballast = bytearray(256 << 20)               # a service's big buffers: 2% of glibc's in-use is 5 MiB now
trimmer = memgap.Trimmer(interval=0.1, quiet=0.3, min_gap=0.2, on_trim=lambda b, a: trims.append(b - a)).start()
deadline = time.time() + 5
while not trims and time.time() < deadline:  # its first trim: whatever came before it started
    time.sleep(0.05)
for i in range(len(keep)):                   # a burst of small objects: pymalloc's, glibc barely moves
    keep[i] = (str(i) * 3, float(i), [i])
for i in range(len(keep)):
    if i % 5000:                             # most freed, a few left in every arena
        keep[i] = None
during = len(trims) - 1                      # trims within the burst (a machine busy elsewhere can starve it
deadline = time.time() + 5                   # so that it looks quiet): counted, not judged
while len(trims) < 2 + during and time.time() < deadline:
    time.sleep(0.05)
trimmer.stop()
print(json.dumps({"trims": trims, "during": during}))
"""


def test_trimmer_with_the_pool_release_sees_a_burst_of_small_objects():
    """A burst of small Python objects moves glibc's in-use bytes by less than the trimmer's
    2% when the process also holds big buffers: with MEMGAP_PYMALLOC_RELEASE=1 the trimmer
    watches pymalloc's blocks too (without that: one trim only, measured), and its trim gives
    back the emptied pools."""
    out = subprocess.run([sys.executable, "-c", SMALL_OBJECT_BURST], capture_output=True, text=True, timeout=60,
                         env=child_env(MEMGAP_PYMALLOC_RELEASE="1"))
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout)
    trims = said["trims"]
    assert len(trims) == 2 + said["during"], said  # the start-up one, any within the burst, the one after it
    assert trims[-1] > 16 << 20, said  # the emptied pools' pages (the burst made about 70 MiB of them)


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="libjemalloc2 is not installed")
def test_trimmer_refuses_other_allocators():
    script = "import memgap\ntry:\n    memgap.Trimmer().start()\nexcept memgap.Unsupported as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", script], env=child_env(LD_PRELOAD=JEMALLOC),
                         capture_output=True, text=True, timeout=60)
    assert "needs glibc's malloc; this process runs jemalloc" in out.stdout


SLEEPER = [sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(30)"]


def _child(env):
    proc = subprocess.Popen(SLEEPER, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_verify_env_reads_what_reached_the_child():
    env = spawn_env(MALLOC_ARENA_MAX="2")
    proc = _child(env)
    try:
        assert verify_env(proc.pid, {"MALLOC_ARENA_MAX": "2"}) == {}
        assert verify_env(proc.pid, {"MALLOC_ARENA_MAX": "3"}) == {"MALLOC_ARENA_MAX": ("2", "3")}
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="libjemalloc2 is not installed")
def test_preload_env_runs_the_child_under_jemalloc():
    env = preload_env("jemalloc", base={**os.environ, "LD_PRELOAD": ""}, dirty_decay_ms="1000")
    assert env["MALLOC_CONF"] == "dirty_decay_ms:1000"
    proc = _child(env)
    try:
        wanted = {k: env[k] for k in ("LD_PRELOAD", "MALLOC_CONF")}
        assert verify_env(proc.pid, wanted) == {}
        maps = pathlib.Path(f"/proc/{proc.pid}/maps").read_text()
        assert "libjemalloc" in maps
    finally:
        proc.kill()
        proc.wait()


def test_periodic_trim_from_the_bootstrap():
    env = {"MEMGAP_TRIM_EVERY": "0.3", "PYTHONPATH": BOOTSTRAP_DIR + os.pathsep + child_env()["PYTHONPATH"]}
    trimmed = _burst(**env)
    assert trimmed["after"] < 60 << 20, trimmed


def test_the_preloaded_libraries_are_mapped():
    """A program started with the value maps the library put in front and the one already there."""
    jemalloc, mimalloc = find_library("jemalloc"), find_library("mimalloc")
    assert jemalloc and mimalloc, "scripts/setup.sh installs libjemalloc2 and libmimalloc2.0"
    env = child_env(LD_PRELOAD=preloaded(jemalloc, mimalloc))
    maps = subprocess.run(["cat", "/proc/self/maps"], env=env, capture_output=True, text=True, check=True).stdout
    mapped = {os.path.realpath(line.split()[-1]) for line in maps.splitlines() if line.split()[-1].startswith("/")}
    assert {os.path.realpath(jemalloc), os.path.realpath(mimalloc)} <= mapped
