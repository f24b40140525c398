"""A first look through memgap's command line at a process that maps large libraries (LLVM's, with jemalloc
preloaded and mimalloc loaded beside it), which does not import memgap: `memgap inspect --json` with no option,
its private folders empty, on this machine's cores (where it has two or more, the reads are shared out among
forked children: memgap.sources.elf_ahead), says what the same look on one core says (`taskset -c 0`: a
container given one CPU), and its second look says it again from what the first kept."""
import json
import os
import subprocess
import sys

import pytest

from memgap.sources import elf_ahead

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = "/usr/lib/x86_64-linux-gnu"
HOLDER = f"""
import ctypes, sys
sys.path.insert(0, {os.path.join(ROOT, "tests", "programs", "big")!r})
from big_libs import library_paths
for path in [*library_paths(), "{LIB}/libmimalloc.so.2"]:
    ctypes.CDLL(path)
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.fixture(scope="module")
def holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LD_PRELOAD": f"{LIB}/libjemalloc.so.2"})
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def look(pid, tmp, *prefix):
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run([*prefix, sys.executable, "-m", "memgap", "inspect", "--json", "-", str(pid)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)["allocator"]


def test_a_first_look_on_several_cores_says_what_one_core_says(holder, tmp_path):
    several, one = tmp_path / "several", tmp_path / "one"
    several.mkdir()
    one.mkdir()
    assert elf_ahead.usable_cpus() >= 2  # the machine CI uses has two: the reads are shared out there
    shared = look(holder, several)
    alone = look(holder, one, "taskset", "-c", "0")
    assert shared == alone
    names = {(f["name"], f["library"]) for f in shared["found"]}
    assert names == {("jemalloc", f"{LIB}/libjemalloc.so.2"),
                     ("mimalloc", os.path.realpath(f"{LIB}/libmimalloc.so.2"))}, names  # glibc's: not serving
    assert shared["name"] == "jemalloc"
    kept = list((several / f"memgap-elf-{os.getuid()}").glob("*.json"))
    assert len(kept) >= 6  # the LLVM libraries, the allocators, libc, Python's own objects
    assert look(holder, several) == shared  # the second look, from what the first kept
