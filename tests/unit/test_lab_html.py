"""A lab's result as HTML in a notebook (``LabDocument._repr_html_``, through IPython's own
display formatter, as Jupyter calls it), for labs saved by earlier memgaps
(``fixtures/documents/``): each variant's figures against the document's own, the verdict."""
import json
import os
import re
from html import unescape

import pytest

from conftest import HERE
from helpers import MiB, self_contained
from memgap.documents.records import LabDocument

SAVED = [os.path.join(HERE, "fixtures", "documents", commit, "lab.json") for commit in ("04f183d", "8a6ec88")]


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.split(os.sep)[-2])
def test_a_saved_lab_renders_in_a_notebook_with_its_own_figures(path):
    from IPython.core.formatters import DisplayFormatter

    with open(path) as f:
        raw = json.load(f)
    lab = LabDocument.from_dict(raw)
    data, _ = DisplayFormatter().format(lab)
    page = data["text/html"]
    assert page == lab._repr_html_()
    self_contained(page)
    assert "<script" not in page
    rows = re.findall(r'<tr data-variant="([^"]*)" data-idle="(\d*)" data-after-trim="(\d*)" data-peak="(\d*)"'
                      r'( class="recommended")?>(.*?)</tr>', page)
    assert [unescape(r[0]) for r in rows] == [v["spec"] for v in raw["variants"]]
    recommended = (raw["recommendation"] or {}).get("variant")  # 04f183d's lab recommends none
    for (_, idle, after_trim, peak, css, cells), v in zip(rows, raw["variants"], strict=True):
        # the exact figures against the saved document's, read from the file, not from the object
        assert [idle, after_trim, peak] == [str(v[k][0]) if v[k] else "" for k in ("idle", "after_trim", "peak")]
        text = [unescape(c) for c in re.findall(r"<td>(.*?)</td>", cells)]
        # the table's idle cell: its median, min and max in whole MiB
        med, lo, hi = v["idle"]
        assert f"{med / MiB:.0f} ({lo / MiB:.0f}-{hi / MiB:.0f})" in text, text
        # the verdict word: the recommended variant's row says so, and only it
        assert (text[-1] == "recommended") == (v["spec"] == recommended) == bool(css), (text, recommended)
    assert f'Verdict: <b class="verdict">{raw["verdict"]}</b>' in unescape(page)
    # the lines that apply the recommendation, where there is one
    if recommended:
        assert f"Apply {recommended}:" in page and " ".join(raw["recommendation"]["shell"]) in unescape(page)
    else:
        assert "Apply" not in page and "keep the defaults" in page
