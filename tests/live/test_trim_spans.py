"""Each trim memgap's trimmers make in a recorded program comes with its span and its thread's CPU
(the lab tells memgap's own CPU from the workload's bursts by them: memgap.lab.work): the Python
bootstrap's idle and periodic trimmers (``trims``), and the native agent's (``agent_exit.trims``),
in real programs that import nothing of memgap."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HERE
from helpers import run_recorded

MiB = 1 << 20
BURST = os.path.join(HERE, "programs", "unmarked_burst.py")
BURST_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    static char *blocks[60000];
    for (int i = 0; i < 60000; i++) { blocks[i] = malloc(2048); memset(blocks[i], 1, 2048); }
    for (int i = 0; i < 60000; i++) if (i % 16) free(blocks[i]);  /* one live chunk in sixteen */
    sleep(4);  /* the idle trimmer trims after 2 s of quiet, checking each second */
    return 0;
}
"""


def _check_spans(trims, run):
    """Each trim: begun after the run's start, before it returned, its CPU at most its span's length
    (one thread), and one of them gave back what glibc held free (~100 MiB)."""
    assert trims, run["processes"]
    for t in trims:
        assert run["start"] < t["started"] <= t["time"], t
        assert 0 <= t["cpu"] <= t["time"] - t["started"] + 0.01, t
    assert max(t["rss_before"] - t["rss_after"] for t in trims) > 30 * MiB, trims


@pytest.mark.parametrize("setting", [{"MEMGAP_TRIMMER": "1"}, {"MEMGAP_TRIM_EVERY": "0.5"}])
def test_the_bootstraps_trimmers_record_each_trims_span_and_cpu(tmp_path, setting):
    _, run = run_recorded(tmp_path, [sys.executable, BURST, "3.5", str(tmp_path / "own.txt")], **setting)
    (proc,) = [p for p in run["processes"] if p.get("trims")]
    assert proc["trimmer"] == ("idle" if "MEMGAP_TRIMMER" in setting else "every 0.5 s")
    _check_spans(proc["trims"], run)


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
@pytest.mark.parametrize("setting", [{"MEMGAP_TRIMMER": "1"}, {"MEMGAP_TRIM_EVERY": "0.5"}])
def test_the_agents_trimmers_record_each_trims_span_and_cpu(tmp_path, setting):
    src = tmp_path / "burst.c"
    src.write_text(BURST_C)
    exe = tmp_path / "burst"
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-o", str(exe), str(src)], check=True)
    _, run = run_recorded(tmp_path, [str(exe)], **setting)
    (proc,) = run["processes"]
    assert proc["agent_exit"]["trimmer"]["trims"] == len(proc["agent_exit"]["trims"])
    _check_spans(proc["agent_exit"]["trims"], run)
