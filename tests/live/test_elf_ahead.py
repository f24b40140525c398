"""The first look's ELF reads shared out among forked children (memgap.sources.elf_ahead), on this machine's
large C++ libraries (LLVM's, about 74 MiB to search): what the children keep is what one core reads; a
process with another thread, or a program that imported memgap, never forks; a folder of facts not ours means
no sharing. The first look through memgap's command line: tests/live/test_first_look.py.

The sharing runs in a fresh Python process of its own (as `memgap inspect` is: one thread), its private
folders under the test's tmp_path, so that what this process finds afterwards can only come from the disk."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

from memgap.allocators.detect import signs
from memgap.sources import elf_ahead
from memgap.sources.elf import forget_elf_files, parse_elf, read_elf, search_size

LIB = "/usr/lib/x86_64-linux-gnu"
BIG = [f"{LIB}/{name}" for name in ("libLLVM-15.so.1", "libLLVM-14.so.1", "libclang-cpp.so.14", "libstdc++.so.6",
                                     "libc.so.6", "libz.so.1")]
SHARE = """
import json, sys, threading
from memgap.allocators.detect import signs
from memgap.sources import own_process
from memgap.sources import elf_ahead
if sys.argv[1] != "imported":  # as memgap's command line does; a program that imported memgap does not
    own_process.mark_command()
if sys.argv[1] == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
print(json.dumps(elf_ahead.read_ahead(sys.argv[2:], signs().query)))
"""


def share_out(tmp, *paths, mode="plain"):
    """How many children a fresh process sharing ``paths`` out forked, its TMPDIR ``tmp``."""
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", SHARE, mode, *paths], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)


def fresh_parse(path):
    with open(path, "rb") as fh:
        return parse_elf(lambda offset, length: os.pread(fh.fileno(), length, offset), os.fstat(fh.fileno()).st_size,
                         signs().query)


@pytest.fixture
def facts_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    forget_elf_files()
    yield tmp_path / f"memgap-elf-{os.getuid()}"
    forget_elf_files()


def test_what_the_children_keep_is_what_one_core_reads(facts_folder):
    assert sum(search_size(p, signs().query) for p in BIG) >= elf_ahead.PARALLEL_LEAST  # the case it is for
    children = share_out(facts_folder.parent, *BIG)
    assert children == min(elf_ahead.usable_cpus(), elf_ahead.WORKERS_MOST, len(BIG)) - 1 >= 1
    assert len(list(facts_folder.glob("*.json"))) == len(BIG)  # each file's facts kept, by whichever process
    for path in BIG:
        assert read_elf(path, signs().query) == fresh_parse(path), path  # from the disk: this process read none
    assert share_out(facts_folder.parent, *BIG) == 0  # all kept: nothing left to share


def test_a_process_with_another_thread_reads_alone(facts_folder):
    assert share_out(facts_folder.parent, *BIG, mode="thread") == 0
    assert not list(facts_folder.glob("*.json"))


def test_a_program_that_imported_memgap_is_never_forked(facts_folder):
    assert share_out(facts_folder.parent, *BIG, mode="imported") == 0
    assert not list(facts_folder.glob("*.json"))


def test_small_files_are_read_by_one_core(facts_folder):
    small = [f"{LIB}/libc.so.6", f"{LIB}/libz.so.1"]
    assert sum(search_size(p, signs().query) for p in small) < elf_ahead.PARALLEL_LEAST
    assert share_out(facts_folder.parent, *small) == 0


def test_without_a_folder_of_ours_nothing_is_shared(facts_folder):
    facts_folder.mkdir(mode=0o777)
    os.chmod(facts_folder, 0o777)  # open to others: memgap keeps nothing there, so children could hand nothing over
    assert share_out(facts_folder.parent, *BIG) == 0
