"""`memgap report RUN.json` on the runs earlier memgaps saved (``fixtures/documents/``): the terminal's
text and the JSON written back, byte for byte as the code printed them before the package's modules
moved into folders and the data crossing them was typed (issue 26: captured on 2b5eb4e's code,
``fixtures/run-report/``). A change in any of them is a change users see: capture again on purpose."""
import os

import pytest

from conftest import HERE
from memgap.cli import main

DOCUMENTS = os.path.join(HERE, "fixtures", "documents")
GOLDEN = os.path.join(HERE, "fixtures", "run-report")
RUNS = ["04f183d/run", "04f183d/run-trim-at-idle", "8a6ec88/run-agent-trim", "8a6ec88/run-trimmer"]


def _golden(name: str) -> str:
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("run", RUNS)
def test_a_saved_runs_report_is_the_bytes_it_was(run, tmp_path, capsys):
    name = run.replace("/", "-")
    capsys.readouterr()
    assert main(["report", os.path.join(DOCUMENTS, f"{run}.json"), "--json", str(tmp_path / "run.json")]) == 0
    assert capsys.readouterr().out == _golden(f"{name}.txt")
    assert (tmp_path / "run.json").read_text(encoding="utf-8") == _golden(f"{name}.json")
