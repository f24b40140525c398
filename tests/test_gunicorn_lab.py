"""`memgap lab` on the driver of a real preforked server, unmodified (issue 15's must-hold):
programs/prefork/drive.py starts gunicorn --preload with 4 sync workers over a table of
about 203 MiB of tracked objects (programs/prefork/table_app.py), sends 8 requests that each
run a full collection, prints its own requests per second, rests 4 s (reading smaps_rollup's
Pss over itself and gunicorn's tree 0.7 of the way: the witness) and stops gunicorn. It
does not import memgap; the lab finds idle itself and applies gc=freeze-at-fork through its
bootstrap, which reaches gunicorn's master (the driver starts it as a Python child, whose
os.fork runs the os.register_at_fork hooks). The baseline and that variant, once each: the
fewest runs the verdict takes.
"""
import json
import os
import re
import sys

from conftest import HERE
from helpers import MiB, memgap, recommended

DRIVE = os.path.join(HERE, "programs", "prefork", "drive.py")
FREEZE = "glibc:gc=freeze-at-fork"


def test_lab_ranks_freezing_the_collector_at_fork_first_on_a_gunicorn_tree(tmp_path):
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--reps", "1", "--variant", "glibc", "--variant", FREEZE,
                  "--metric", "requests_per_s", "--metric-regex", r"requests per second: ([\d.]+)",
                  "--json", str(out), "--dir", str(tmp_path / "runs"), "--show-output",
                  "--", sys.executable, DRIVE, "8", "4", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lab = json.loads(out.read_text())
    runs = {r["variant"]: r for r in lab["runs"]}
    # the driver's own readings, one per run in the lab's order (the baseline first)
    witness = [int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("rest pss ")]
    rates = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("requests per second: ")]
    assert [r["variant"] for r in lab["runs"]] == ["glibc", FREEZE] and len(witness) == len(rates) == 2, proc.stdout
    for (variant, r), pss, rate in zip(runs.items(), witness, rates, strict=True):
        assert r["status"] == "ok" and r["idle_rule"].startswith("idle (quiet"), r
        # the tree at idle: the driver, the master and its 4 workers, each by its PSS (none by RSS)
        assert "sum over the 6 processes" in r["tree_how"] and "RSS for" not in r["tree_how"], r["tree_how"]
        assert abs(r["idle"] - pss) <= 0.1 * pss, (variant, r["idle"] / MiB, pss / MiB)
        assert r["throughput"] == rate, (variant, r["throughput"], rate)
    base, frozen = runs["glibc"], runs[FREEZE]
    assert frozen["idle"] <= 0.5 * base["idle"], (frozen["idle"] / MiB, base["idle"] / MiB)
    # the hook reached gunicorn's master: frozen before each fork, the workers copied little
    workers = {v: sorted(t["pss"] for t in runs[v]["tree"] if "gunicorn" in t["cmd"])[:4] for v in runs}
    assert max(workers[FREEZE]) < 0.6 * min(workers["glibc"]), workers
    assert recommended(lab) == FREEZE, lab["verdict"]
    said = " ".join(proc.stdout.split())
    # the throughput is printed beside idle: its column, and the verdict says what its slowdown is by
    header = next(line for line in proc.stdout.splitlines() if "variant" in line and "idle" in line)
    cells = [c.strip() for c in header.strip("┃│ ").replace("┃", "│").split("│")]
    assert cells[cells.index("idle") + 1] == "requests_per_s", cells
    # the variant's name may wrap in its cell: its row is the first under the header (ranked first)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│ ")]
    assert rows[0].startswith("│ glibc:gc="), rows
    rate = frozen["throughput"]
    shown = f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"  # three figures, never 1.53e+03
    assert re.search(rf"│\s+{re.escape(shown)} \(", rows[0]), rows[0]
    assert "Verdict: idle PSS summed over the tree" in said and "(by its throughput)" in said, said[-3000:]
    # the remedy lines: the bootstrap's environment, plain Python, and gunicorn's own hooks
    assert "MEMGAP_GC_FREEZE_AT_FORK=1" in said and "os.register_at_fork(before=gc.freeze" in said
    assert "def pre_fork(server, worker): gc.freeze()" in said and "def post_fork(server, worker): gc.enable()" in said
