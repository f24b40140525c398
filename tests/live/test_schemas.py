"""The documents' JSON Schemas (docs/schemas/, issue 25): every document memgap writes validates, and a
wrong one is refused by both the schema and ``from_dict``, which names the field. Documents written
here by real runs of memgap on real programs (what is published against what the readers check, and
the documents saved from earlier versions: tests/unit/test_schemas_published.py)."""
import json
import os
import subprocess
import sys

import jsonschema
import pytest

from conftest import HERE
from helpers import memgap

SCHEMAS = os.path.join(HERE, "..", "docs", "schemas")


def schema_of(name):
    with open(os.path.join(SCHEMAS, name.replace("/", "-") + ".json")) as fh:
        return json.load(fh)


def valid(document, schema=None):
    """``document`` against its schema's published form (or ``schema``'s)."""
    jsonschema.Draft202012Validator(schema_of(schema or document["schema"])).validate(document)


@pytest.fixture(scope="module")
def resting():
    """A Python program at rest that does not import memgap, with a forked child."""
    code = ("import os, sys\nblocks = [bytes(4096) for _ in range(5000)]\nif os.fork():\n    "
            "print('ready', flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    yield proc
    proc.stdin.close()  # both read to its end, and exit
    proc.wait(timeout=30)


def _written(command, *args):
    done = memgap(command, "--json", "-", *args, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_what_memgap_writes_validates(resting, tmp_path):
    from memgap.documents.records import RunDocument, TreeDocument
    from memgap.documents.snapshot import Snapshot

    snap = _written("inspect", str(resting.pid))
    valid(snap)
    Snapshot.from_dict(snap)
    tree = _written("inspect", str(resting.pid), "--tree")
    valid(tree)
    assert len(TreeDocument.from_dict(tree).processes) == 2
    valid(_written("snapshot"))
    run = _written("run", "--", sys.executable, "-c", "x = [bytes(1000) for _ in range(10000)]")
    valid(run)
    RunDocument.from_dict(run)
    for snapshot in run["processes"][0]["snapshots"]:
        valid({"schema": "memgap.snapshot/1", **snapshot})


@pytest.mark.parametrize("change, field", [
    ({"rss": "big"}, "rss"),
    ({"schema": "memgap.snapshot/9"}, "schema"),
    ({"layers": {"files": {"name": "files"}}}, "resident"),
    ({"layers": {"files": {"name": "files", "resident": 1.5}}}, "resident"),
    ({"findings": [{"code": "x"}]}, "severity"),
    # its typed parts, each checked as a document is (issue 26)
    ({"trim": {"performed": True, "rss_after": 1}}, "rss_before"),
    ({"trim": {"performed": True, "route": "pigeon", "rss_before": 2, "rss_after": 1}}, "route"),
    ({"copied_from_parent": {"parent": 1, "copied": "lots"}}, "copied"),
    ({"pymalloc": {"arenas_current": 1}}, "arenas_highwater"),
    ({"python_heap": {"source": "gc-walk", "largest": {}}}, "largest"),
])
def test_a_wrong_snapshot_is_refused_by_both(resting, change, field):
    from memgap.documents.snapshot import Snapshot
    from memgap.errors import MalformedInput

    snap = {**_written("inspect", str(resting.pid)), **change}
    with pytest.raises(jsonschema.ValidationError):
        valid(snap, "memgap.snapshot/1")
    with pytest.raises(MalformedInput, match=field):
        Snapshot.from_dict(snap)


def test_a_snapshot_read_back_writes_the_same_json(resting):
    """A snapshot and a tree as memgap wrote them, read into their classes and written again: the same
    JSON, key order included (its typed parts write what their dicts did)."""
    from memgap.documents.records import TreeDocument
    from memgap.documents.snapshot import Snapshot

    snap = _written("inspect", str(resting.pid))
    assert json.dumps(Snapshot.from_dict(snap).to_dict(regions=False)) == json.dumps(snap)
    tree = _written("inspect", str(resting.pid), "--tree")
    assert any(p["copied_from_parent"] for p in tree["processes"])  # the forked child's part, typed
    assert json.dumps(TreeDocument.from_dict(tree).to_dict()) == json.dumps(tree)


def test_a_snapshot_without_its_layers_is_refused(resting):
    from memgap.documents.snapshot import Snapshot
    from memgap.errors import MalformedInput

    snap = _written("inspect", str(resting.pid))
    del snap["layers"]
    with pytest.raises(jsonschema.ValidationError):
        valid(snap)
    with pytest.raises(MalformedInput, match="layers"):
        Snapshot.from_dict(snap)


def test_a_fresh_lab_validates(tmp_path):
    """A lab run now, on a program that does not import memgap: its document validates and loads."""
    from memgap.documents.records import LabDocument

    out = tmp_path / "lab.json"
    done = memgap("lab", "--reps", "1", "--variant", "glibc", "--variant", "glibc:arena_max=2", "--json", str(out),
                  "--", sys.executable, "-c", "x = [bytes(1000) for _ in range(20000)]; del x", timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    lab = json.loads(out.read_text())
    valid(lab)
    assert LabDocument.from_dict(lab).runs
