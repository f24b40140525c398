"""The memory cgroup read live: a program started in a 512 MiB cgroup of the test's own (needs root and
a writable memory controller). The cgroup's files parsed, captured and constructed:
tests/unit/test_cgroup.py."""
import json
import os
import subprocess
import sys

import pytest

from helpers import memgap, memory_cgroup

MiB = 1 << 20


HOLDER = r"""
import os, sys
anon = bytearray(os.urandom(1 << 20) * 48)         # 48 MiB of its own, written
with open(sys.argv[1], "wb") as fh:                # 32 MiB of page cache, charged to the cgroup
    fh.write(os.urandom(32 << 20))
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_program_in_a_limited_cgroup_is_shown_with_its_cgroup(tmp_path):
    """A program started in a 512 MiB memory cgroup of its own: inspect shows the limit,
    the program's anonymous memory and the file it wrote as page cache, each at least what
    the program put there, and the cgroup's usage against its RSS."""
    path = memory_cgroup(f"memgap-test-cgroup-{os.getpid()}", 512 * MiB)
    if path is None:
        pytest.skip("needs root and a writable memory cgroup (v1 or v2): see tests/README.md")

    def enter():
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "cache.bin")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, preexec_fn=enter)
    try:
        assert holder.stdout.readline().strip() == "ready"
        proc = memgap("inspect", str(holder.pid), "--json", "-")
        assert proc.returncode == 0, proc.stderr
        snap = json.loads(proc.stdout)
        text = memgap("inspect", str(holder.pid)).stdout
    finally:
        holder.kill()
        holder.wait()
        os.rmdir(path)
    cg = snap["cgroup"]
    assert cg["path"].endswith(f"memgap-test-cgroup-{os.getpid()}") and cg["limit"] == 512 * MiB
    assert cg["anon"] >= 48 * MiB and cg["file"] >= 32 * MiB, cg
    assert cg["usage"] >= cg["anon"] + 32 * MiB and cg["headroom"] == 512 * MiB - cg["usage"]
    assert cg["usage"] - cg["inactive_file"] == cg["working_set"] >= 48 * MiB
    assert snap["rss"] < cg["usage"]  # the page cache the program wrote is charged, not resident in it
    flat = "".join(text.split())  # a long cgroup path may be folded across lines
    assert f"memorycgroup{cg['path']}" in flat and "limit512.0MiB" in flat, text
