"""memgap on the test's own process, where nothing else is started: a process named by its PID and
start time (a reused PID refused), and a snapshot taken in-process. Sources read from other live
processes: tests/live/test_sources_live.py."""
import os

import pytest


def test_a_process_is_its_pid_and_start_time():
    from memgap.errors import PidReused
    from memgap.sources.processes import ProcessIdentity

    with open(f"/proc/{os.getpid()}/stat") as fh:  # field 22, after the command name in parentheses
        started = int(fh.read().rpartition(")")[2].split()[19])
    me = ProcessIdentity.of(os.getpid())
    assert me == ProcessIdentity(os.getpid(), started)
    me.check()  # still this process
    with pytest.raises(PidReused, match=r"was reused by another process \(its start time changed while") as err:
        ProcessIdentity(os.getpid(), started + 1).check()
    assert err.value.exit_code == 7


def test_in_process_leaves_them_unmeasured_and_says_why():
    """A snapshot taken in-process leaves the layers' PSS unmeasured (mincore tells residency only, not
    sharing), and says why (a tree summed by PSS, read from outside: tests/live/test_tree_pss.py)."""
    from memgap.explain.snapshot import snapshot_self

    snap = snapshot_self()
    assert snap.pss_unexplained is None and "mincore" in snap.pss_note
    assert all(layer.pss is None for layer in snap.layers.values())
    assert snap.status.get("Pss")
