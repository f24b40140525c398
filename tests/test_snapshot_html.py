"""A snapshot as HTML in a notebook (``Snapshot._repr_html_``, through IPython's own display
formatter, as Jupyter calls it), and what `import memgap` leaves out."""
import json
import subprocess
import sys

import memgap
from conftest import child_env
from helpers import MiB, html_figures, self_contained, vmrss
from memgap.model import Finding, Snapshot


def test_a_snapshot_renders_in_a_notebook_with_its_own_figures():
    from IPython.core.formatters import DisplayFormatter

    keep = [b"x" * 100_000 for _ in range(200)]  # 20 MiB of C allocations, resident, in this process
    before = vmrss("self")
    snap = memgap.snapshot()
    after = vmrss("self")
    data, _ = DisplayFormatter().format(snap)
    page = data["text/html"]
    assert page == snap._repr_html_()
    self_contained(page)
    rows, embedded = html_figures(page)
    assert embedded is None  # a fragment: the figures are in its table
    # against the object's own values
    assert rows.pop("rss") == snap.rss and rows.pop("unexplained") == snap.unexplained
    assert rows == {k: v.resident for k, v in snap.layers.items() if v.resident is not None}
    # against the kernel's figure, read here around the snapshot
    assert min(before, after) - MiB <= snap.rss <= max(before, after) + MiB, (snap.rss, before, after)
    assert rows["allocator_in_use"] >= 20 * MiB and len(keep) == 200
    assert f"RSS {snap.rss / MiB:.1f} MiB" in page


def test_strings_from_the_process_cannot_make_markup():
    snap = Snapshot.from_dict(memgap.snapshot().to_dict(regions=False))
    evil = '</table></div><script>alert("x")</script><img src=x onerror=alert(1)>'
    snap.findings.append(Finding("test", "warning", evil, remedy=evil))
    snap.allocator = {**snap.allocator, "found": [{"name": evil, "library": evil, "how": evil}]}
    page = snap._repr_html_()
    assert "<script" not in page and "<img" not in page and evil not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    from memgap.report.snapshot_html import snapshot_page

    whole = snapshot_page(snap)
    assert whole.count("<script") == 1  # the JSON block only, which safe_json keeps closed
    _, doc = html_figures(whole)
    assert doc["findings"][-1]["summary"] == evil


def test_import_memgap_leaves_the_integrations_out():
    probe = ("import json, sys, memgap\n"
             "print(json.dumps(sorted(sys.modules)))\n"
             "import memgap.web\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    plain, with_web = (set(json.loads(line)) for line in out.stdout.splitlines())
    for name in ("memgap.web", "memgap.report.snapshot_html", "memgap.report.html", "memgap.prometheus",
                 "memgap_pytest", "rich", "starlette", "anyio", "uvicorn", "gunicorn", "IPython"):
        assert name not in plain, name
    # the middleware imports no server or framework of its own either
    assert not {"starlette", "anyio", "uvicorn", "gunicorn", "rich"} & with_web
