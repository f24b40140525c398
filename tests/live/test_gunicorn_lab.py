"""`memgap lab` on the driver of a real preforked server, unmodified, with no --variant named
(issue 15's must-hold, and issue 22's: a user would not know to name gc=freeze-at-fork):
programs/prefork/drive.py starts gunicorn --preload with 4 sync workers over a table of
about 203 MiB of tracked objects (programs/prefork/table_app.py), sends 8 requests that each
run a full collection, prints its own requests per second, rests 3 s (reading smaps_rollup's
Pss over itself and gunicorn's tree, and its workers' private bytes, 0.7 of the way: the
witnesses) and stops gunicorn. It does not import memgap. The lab runs its default set:
the baseline's first run shows the workers copied their master's pages (the lab reads the
tree at rest: memgap.lab.fork_probe), so gc=freeze-at-fork joins the set, with that reason,
and is applied through the bootstrap, which reaches gunicorn's master (the driver starts it
as a Python child, whose os.fork runs the os.register_at_fork hooks). One repetition: the
whole default set once (16 runs) is this file's cost.
"""
import json
import os
import re
import sys

from conftest import HERE
from helpers import MiB, memgap, recommended
from memgap.allocators.variants import DEFAULT_SPECS

DRIVE = os.path.join(HERE, "programs", "prefork", "drive.py")
FREEZE = "glibc:gc=freeze-at-fork"
CHOSEN = "chosen because: finding copied-from-parent: 4 workers each copied "


def _figures(stdout, prefix):
    """The driver's readings that begin with ``prefix``, one per run, in the lab's order."""
    return [float(line.rsplit(None, 1)[1]) for line in stdout.splitlines() if line.startswith(prefix)]


def test_lab_with_no_variant_named_tries_and_recommends_freezing_the_collector_on_a_gunicorn_tree(tmp_path):
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--reps", "1",
                  "--metric", "requests_per_s", "--metric-regex", r"requests per second: ([\d.]+)",
                  "--json", str(out), "--dir", str(tmp_path / "runs"), "--show-output",
                  "--", sys.executable, DRIVE, "8", "3", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lab = json.loads(out.read_text())
    runs = lab["runs"]
    # the default set, every variant this machine has, and what the baseline's findings added
    # (freeze-at-fork among them) right after the baseline, each with the finding
    skipped = {line.split(":")[0] for line in lab["skipped"]}
    added = [spec for spec, why in lab["chosen"].items() if why.startswith("chosen because: finding ")]
    assert runs[0]["variant"] == "glibc" and FREEZE in added, lab["chosen"]
    assert [r["variant"] for r in runs[1:1 + len(added)]] == added, lab["order"]
    assert sorted(r["variant"] for r in runs) == sorted({*DEFAULT_SPECS, *added} - skipped), lab["order"]
    # the driver's own readings, one per run in the lab's order (the baseline first)
    witness, private = _figures(proc.stdout, "rest pss "), _figures(proc.stdout, "rest workers private ")
    rates = _figures(proc.stdout, "requests per second: ")
    assert len(witness) == len(rates) == len(private) == len(runs), proc.stdout[-3000:]
    for r, pss, rate in zip(runs, witness, rates, strict=True):
        assert r["status"] == "ok" and r["idle_rule"].startswith("idle (quiet"), r
        # the tree at idle: the driver, the master and its 4 workers, each by its PSS (none by RSS)
        assert "sum over the 6 processes" in r["tree_how"] and "RSS for" not in r["tree_how"], r["tree_how"]
        assert abs(r["idle"] - pss) <= 0.1 * pss, (r["variant"], r["idle"] / MiB, pss / MiB)
        assert r["throughput"] == rate, (r["variant"], r["throughput"], rate)
    # why it ran: the baseline's workers copied their master's pages, about all their private bytes
    why = lab["chosen"][FREEZE]
    assert why.startswith(CHOSEN), why
    copied = float(why.split(" MiB copied")[0].rsplit(None, 1)[1]) * MiB  # "(N MiB of the TOTAL MiB copied"
    # the probe reads the tree at its first rest, the driver its workers at the last: 466 against 456 once
    assert 0.8 * private[0] <= copied <= 1.1 * private[0], (copied / MiB, private[0] / MiB)
    assert all(lab["chosen"][spec] == "the default set" for spec in DEFAULT_SPECS[1:] if spec not in skipped)
    said = " ".join(proc.stdout.split())
    assert f"{FREEZE}: {CHOSEN}" in said and "chosen from the baseline's findings" in said, said[:3000]
    shown = memgap("report", str(tmp_path / "runs"))  # the lab's folder keeps what was added, and why
    assert shown.returncode == 0 and f"{FREEZE}: {CHOSEN}" in " ".join(shown.stdout.split()), shown.stderr
    base, frozen = runs[0], next(r for r in runs if r["variant"] == FREEZE)
    assert frozen["idle"] <= 0.5 * base["idle"], (frozen["idle"] / MiB, base["idle"] / MiB)
    # the hook reached gunicorn's master: frozen before each fork, the workers copied little, three of four at
    # least: the freeze ends the collector's copies, not those of a worker's reads (reference counts), and the
    # requests' reads may fall on one worker (a fresh clone: 58, 61, 64 and 145 MiB against 147 each unfrozen)
    workers = {r["variant"]: sorted(t["pss"] for t in r["tree"] if "gunicorn" in t["cmd"])[:4] for r in (base, frozen)}
    assert workers[FREEZE][2] < 0.6 * min(workers["glibc"]), workers
    assert recommended(lab) == FREEZE, lab["verdict"]
    # the throughput is printed beside idle: its column, and the verdict says what its slowdown is by
    header = next(line for line in proc.stdout.splitlines() if "variant" in line and "idle" in line)
    cells = [c.strip() for c in header.strip("┃│ ").replace("┃", "│").split("│")]
    assert cells[cells.index("idle") + 1] == "requests_per_s", cells
    # the variant's name may wrap in its cell: its row is the first under the header (ranked first)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│ ")]
    assert rows[0].startswith("│ glibc:gc="), rows
    rate = lab["variants"][0]["throughput"][0]
    shown = f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"  # three figures, never 1.53e+03
    assert re.search(rf"│\s+{re.escape(shown)} \(", rows[0]), rows[0]
    assert "Verdict: idle PSS summed over the tree" in said and "(by its throughput)" in said, said[-3000:]
    # the remedy lines: the bootstrap's environment, plain Python, and gunicorn's own hooks
    assert "MEMGAP_GC_FREEZE_AT_FORK=1" in said and "os.register_at_fork(before=gc.freeze" in said
    assert "def pre_fork(server, worker): gc.freeze()" in said and "def post_fork(server, worker): gc.enable()" in said
