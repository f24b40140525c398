"""A program that takes memgap.snapshot() of itself (the API, as `memgap.phase()` under `memgap run` does):
the snapshot must not move glibc's mmap threshold, which decides whether the program's later blocks of that
size go back to the kernel when freed ("never change the target"). tests/programs/own_threshold.py finds the
threshold before and after one snapshot without moving it itself, in a process that maps what a big one does
(a 1 GiB private mapping, libLLVM-15 mapped from its file) and, the second time, 2,400 one-page mappings too
(a maps file of ~180 KB: a PyTorch process has 1,600). Before memgap.sources.page_bits it went 256 -> 512 KiB
in both."""
import os
import subprocess
import sys

import pytest

from conftest import HERE

PROGRAM = os.path.join(HERE, "programs", "own_threshold.py")


@pytest.mark.parametrize("mappings", ["0", "2400"])
def test_a_snapshot_of_itself_leaves_the_programs_mmap_threshold(mappings):
    done = subprocess.run([sys.executable, PROGRAM, mappings], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "the snapshot left it as it was" in done.stdout, done.stdout + done.stderr
