"""The memory cgroup's view: parsed from files captured on this project's v1 machine (and a
constructed v2 set). Read live for a program started in a cgroup of its own:
tests/live/test_cgroup_live.py."""
import os

import pytest

from conftest import FIXTURES
from memgap.errors import MalformedInput
from memgap.sources import cgroup as C  # noqa: N812 - a short alias, on most lines

MiB = 1 << 20
V1 = os.path.join(FIXTURES, "cgroup", "v1-debian12")
V2 = os.path.join(FIXTURES, "cgroup", "v2-constructed")


def _files(folder):
    return {name: open(os.path.join(folder, name)).read() for name in os.listdir(folder)}


def test_v1_files_captured_on_debian():
    files = _files(V1)
    found = C.parse_v1("/process_api/x", files)
    # figures straight from the capture (memory.stat's hierarchical total_* lines)
    assert found.usage == int(files["memory.usage_in_bytes"])
    assert found.limit is None  # 9223372036854771712: v1's "no limit"
    assert found.peak == int(files["memory.max_usage_in_bytes"])
    assert (found.anon, found.file, found.inactive_file) == (2207744, 587313152, 289636352)
    assert found.working_set == found.usage - 289636352
    assert found.kernel == int(files["memory.kmem.usage_in_bytes"]) and found.sock == 0
    place = C.find_memory_cgroup(files["proc_self_cgroup"], files["mountinfo_cgroup.txt"])
    assert place == C.CgroupPlace(1, "/process_api/502186797e5045e401634d81fa1bff71",
                                  "/sys/fs/cgroup/memory/process_api/502186797e5045e401634d81fa1bff71",
                                  "/sys/fs/cgroup/memory")


def test_v2_files_and_the_lowest_limit_up_the_tree():
    files = _files(V2)
    found = C.parse_v2("/kubepods.slice/pod", files, [None, 768 * MiB, None])
    assert found.limit == 768 * MiB  # a parent's memory.max below the cgroup's own 1 GiB kills first
    assert C.parse_v2("/p", files).limit == 1024 * MiB
    assert (found.usage, found.peak, found.anon, found.kernel, found.sock) == (512 * MiB, 768 * MiB, 304 * MiB,
                                                                               14 * MiB, 4096)
    assert found.working_set == 512 * MiB - 128 * MiB
    assert found.reclaimable == 203423744 - 8 * MiB  # page cache but shmem
    place = C.find_memory_cgroup(files["proc_pid_cgroup"], files["mountinfo.txt"])
    assert place.version == 2 and place.directory == ("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"
                                                      "pod1234/cri-containerd-abcd.scope")
    # before Linux 5.18 memory.stat has no "kernel" line: its parts are summed
    older = dict(files, **{"memory.stat": "\n".join(line for line in files["memory.stat"].splitlines()
                                                    if not line.startswith("kernel "))})
    assert C.parse_v2("/p", older).kernel == 1048576 + 2097152 + 262144 + 11272192


@pytest.mark.parametrize("bad", ["anon x\n", "anon 1 2\n", "anon -5\n"])
def test_malformed_memory_stat_is_a_clear_error(bad):
    with pytest.raises(MalformedInput, match=r"memory\.stat"):
        C.parse_v1("/x", {"memory.stat": bad})
    with pytest.raises(MalformedInput, match=r"memory\.current"):
        C.parse_v2("/x", {"memory.stat": "anon 1\n", "memory.current": "lots\n"})


def test_no_memory_controller_mounted_is_none():
    assert C.find_memory_cgroup("0::/\n", "24 1 0:5 / /proc rw - proc proc rw\n") is None


def test_a_run_cgroup_oom_killed_at_its_limit_v1_captured():
    found = C.parse_run_charge(1, _files(os.path.join(FIXTURES, "cgroup", "v1-run-oom-killed")))
    assert found == C.RunCharge(peak=32 * MiB, oom_kills=1, limit_hits=0)  # failcnt stays 0 on this kernel


def test_a_run_cgroup_v2_and_the_files_a_kernel_lacks():
    assert C.parse_run_charge(2, _files(V2)) == C.RunCharge(peak=768 * MiB, oom_kills=1, limit_hits=57)
    # before Linux 5.19 v2 has no memory.peak, and before 4.13 v1 counts no OOM kill: unknown, not 0
    assert C.parse_run_charge(2, {"memory.events": "oom_kill 0\n"}) == C.RunCharge(None, 0, None)
    assert C.parse_run_charge(1, {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"}).oom_kills is None
    with pytest.raises(MalformedInput, match=r"memory\.oom_control"):
        C.parse_run_charge(1, {"memory.oom_control": "oom_kill one\n"})
