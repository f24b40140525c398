"""A snapshot as HTML in a notebook (``Snapshot._repr_html_``, through IPython's own display
formatter, as Jupyter calls it), and what `import memgap` leaves out."""
import json
import subprocess
import sys
from dataclasses import replace

import memgap
from conftest import child_env
from helpers import MiB, html_figures, self_contained, vmrss
from memgap.documents.allocator import FoundAllocator
from memgap.documents.snapshot import Finding, Snapshot


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
    snap.allocator = replace(snap.allocator, found=[FoundAllocator(evil, evil, how=evil)])
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


def test_the_text_fallback_is_one_line_with_the_figures():
    """print(memgap.snapshot()) and a notebook's text/plain: one line, its RSS and layers (21 KB of fields
    before), and a document's cmd filled in-process as from outside."""
    from IPython.core.formatters import DisplayFormatter

    snap = memgap.snapshot()
    text = DisplayFormatter().format(snap)[0]["text/plain"]
    assert text == repr(snap) and "\n" not in text and len(text) < 1000, text
    objects = snap.layers["python_objects"].resident / MiB
    assert f"RSS {snap.rss / MiB:.1f} MiB" in text and f"python_objects {objects:.1f}" in text
    with open("/proc/self/cmdline", "rb") as fh:
        assert snap.cmd == [a.decode() for a in fh.read().split(b"\0") if a]


def test_an_arena_not_walked_says_why_where_its_figures_would_be():
    from memgap.report.terminal import render_snapshot

    doc = memgap.snapshot().to_dict(regions=False)
    free = doc["layers"]["allocator_free"]["detail"]
    main = next(a for a in free["arenas"] if a["main"])
    main.update(address=0, problem="main arena not located", walk_complete=False)
    import io

    out = io.StringIO()
    render_snapshot(Snapshot.from_dict(doc), out, 200)
    text = " ".join(out.getvalue().split())  # the title may wrap
    assert "not walked: arena 0: main arena not located" in text
    assert "│ 0 main │" in text and "│ not walked │" in text.split("│ 0 main │")[1].split("\n")[0]
