"""A GPU process's host memory named (issue 33), the half that runs without a GPU: a Python process (it does not
import memgap) with shared anonymous memory but no CUDA context is NOT named pinned, even with a file called
``libcuda.so.1`` mapped, its layers add up as before, and nothing about a GPU is printed, nor any error; one
that maps files named as PyTorch's CUDA build without a context (``import torch`` of a CUDA wheel on a
machine without a GPU) gets no PyTorch variant from the lab's default set.
Witnesses: the process's smaps (the shared mapping's Rss) and its status, read by the test. The captured CUDA
processes: ``tests/unit/test_gpu_units.py``; the GPU machine's check: ``scripts/gpu_check.sh``.
"""
import json
import os
import subprocess
import sys

import pytest

from helpers import MiB, check_adds_up, memgap

SIZE = 48 * MiB
PROGRAM = """
import mmap, sys
buf = mmap.mmap(-1, {size}, flags=mmap.MAP_SHARED)   # anonymous MAP_SHARED: /dev/zero (deleted) in maps
buf.write(b"x" * {size})
with open(sys.argv[1], "rb") as fh:                  # a file named like CUDA's driver library, mapped
    lib = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
print(hex(id(buf)), flush=True)
sys.stdin.readline()
"""


@pytest.fixture(scope="module")
def shared_no_cuda(tmp_path_factory):
    lib = tmp_path_factory.mktemp("cuda") / "libcuda.so.1"
    lib.write_bytes(b"\x7fELF" + bytes(8188))
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM.format(size=SIZE), str(lib)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()  # it wrote its shared memory and mapped the file
    yield proc
    proc.stdin.close()
    proc.wait(timeout=30)


def shared_rss(pid):
    """The Rss of the process's /dev/zero (deleted) mappings, from its smaps."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith("/dev/zero (deleted)")
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


def test_shared_anonymous_memory_without_cuda_is_not_pinned(shared_no_cuda):
    pid = shared_no_cuda.pid
    with open(f"/proc/{pid}/maps") as fh:
        assert "libcuda.so.1" in fh.read()
    proc = memgap("inspect", str(pid), "--json", "-", "--regions")
    assert proc.returncode == 0, proc.stderr[-2000:]
    snap = json.loads(proc.stdout)
    assert "pinned_host" not in snap["layers"] and "gpu_driver" not in snap["layers"]
    assert snap["gpu"] is None
    witness = shared_rss(pid)
    assert witness >= SIZE
    assert abs(snap["layers"]["shared_memory"]["detail"]["anonymous"] - witness) <= MiB
    assert not [r for r in snap["regions"] if r["owner"] in ("pinned-likely", "gpu-driver")]
    check_adds_up(snap)


def test_without_a_gpu_nothing_is_said(shared_no_cuda):
    proc = memgap("inspect", str(shared_no_cuda.pid))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    text = proc.stdout.lower()
    assert "shared memory" in text  # the breakdown is there...
    for word in ("pinned", "gpu", "nvml", "device memory", "cuda"):  # ...and no word of a GPU
        assert word not in text, word
    assert os.path.exists(f"/proc/{shared_no_cuda.pid}")  # the target lives on


MAPS_FILES = """
import mmap, sys, time
libs = []
for path in sys.argv[1:]:                            # files named like PyTorch's CUDA build and CUDA's driver
    with open(path, "rb") as fh:
        libs.append(mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ))
        libs[-1].read(4096)                          # a resident page of each
time.sleep(0.5)
"""


def test_pytorchs_cuda_build_without_a_context_adds_no_lab_variant(tmp_path):
    """The lab's default set tries PyTorch's cache settings only where a process has a CUDA context: a real
    process mapping libc10_cuda.so, libtorch_cuda.so and libcuda.so.1, recorded by `memgap run`, gives the lab
    nothing to add (its snapshots have no gpu_driver layer)."""
    from memgap.documents.records import RunDocument
    from memgap.lab.choose import choose, run_libraries

    libs = []
    for name in ("libc10_cuda.so", "libtorch_cuda.so", "libcuda.so.1"):
        libs.append(tmp_path / name)
        libs[-1].write_bytes(b"\x7fELF" + bytes(8188))
    path = tmp_path / "run.json"
    proc = memgap("run", "--json", str(path), "--", sys.executable, "-c", MAPS_FILES, *map(str, libs))
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = RunDocument.from_dict(json.loads(path.read_text()))
    snaps = [s for p in run.processes for s in p.snapshots]
    assert snaps and not [s for s in snaps if "gpu_driver" in s["layers"]]
    assert run_libraries(run) == set()
    assert not [c for c in choose([], {"glibc"}, True, libraries=run_libraries(run)) if c.spec.startswith("torch:")]
