"""A snapshot as HTML in a notebook (``Snapshot._repr_html_``, through IPython's own display
formatter, as Jupyter calls it), and what `import memgap` leaves out."""
import json
import os
import subprocess
import sys
from dataclasses import replace
from html import unescape

import memgap
from conftest import HERE, child_env
from helpers import MiB, html_figures, memgap as run_memgap, self_contained, vmrss
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


# In a fresh interpreter: a snapshot made by memgap.snapshot(), or read back by Snapshot.from_dict with
# nothing of memgap's API imported, shows itself through the renderer memgap/__init__ registers (the
# documents import none); the page is the renderer's own, and the renderer is loaded only once shown.
FRESH = """
import json, sys
{make}
before = "memgap.report.snapshot_html" in sys.modules
page = snap._repr_html_()
from memgap.report.snapshot_html import snapshot_fragment
layers = {{k: v.resident for k, v in snap.layers.items()}}
print(json.dumps({{"before": before, "same": page == snapshot_fragment(snap), "page": page,
                  "rss": snap.rss, "unexplained": snap.unexplained, "layers": layers}}))
"""
MADE = "import memgap\nsnap = memgap.snapshot()"
READ = ("from memgap.documents.snapshot import Snapshot\n"
        "snap = Snapshot.from_dict(json.load(open(sys.argv[1])))")


def _fresh(make, *args):
    out = subprocess.run([sys.executable, "-c", FRESH.format(make=make), *args], capture_output=True, text=True,
                         env=child_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_snapshot_shows_itself_in_a_fresh_interpreter_however_it_was_made(tmp_path):
    made = _fresh(MADE)
    # a program that does not import memgap, read from outside and saved as `inspect --json` writes it
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; x = bytearray(24 << 20); x[::4096] = "
                               "b'1' * len(x[::4096]); print('ready', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        saved = tmp_path / "snap.json"
        proc = run_memgap("inspect", str(holder.pid), "--json", str(saved))
        assert proc.returncode == 0, proc.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    read = _fresh(READ, str(saved))
    doc = json.loads(saved.read_text())
    for shown in (made, read):
        assert shown["same"] and not shown["before"]
        self_contained(shown["page"])
        rows, _ = html_figures(shown["page"])
        assert rows.pop("rss") == shown["rss"] and rows.pop("unexplained") == shown["unexplained"]
        assert rows == {k: v for k, v in shown["layers"].items() if v is not None}
    # the one read back: its figures against the saved file's, read as JSON, not through memgap
    rows, _ = html_figures(read["page"])
    assert rows["rss"] == doc["rss"] and rows["unexplained"] == doc["unexplained"]
    assert {k: v for k, v in rows.items() if k not in ("rss", "unexplained")} == \
        {k: v["resident"] for k, v in doc["layers"].items() if v["resident"] is not None}
    assert sum(v for k, v in rows.items() if k != "rss") == doc["rss"] >= 24 * MiB  # the holder's bytes, written


def test_import_memgap_leaves_the_integrations_out():
    probe = ("import json, sys, memgap\n"
             "print(json.dumps(sorted(sys.modules)))\n"
             "import memgap.web\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    plain, with_web = (set(json.loads(line)) for line in out.stdout.splitlines())
    # nor the documents: what registers their renderers (memgap.documents.display) loads none of them
    for name in ("memgap.web", "memgap.report.snapshot_html", "memgap.report.html", "memgap.prometheus",
                 "memgap.documents.snapshot", "memgap.documents.records",
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


SAVED_LAB = os.path.join(HERE, "fixtures", "documents", "8a6ec88", "lab.json")


def test_a_saved_lab_shows_itself_in_a_fresh_interpreter():
    """Only the documents imported: the lab shows itself through the renderer memgap/__init__ registers
    (the documents import none), loaded when first shown; the page is the renderer's own."""
    probe = ("import json, sys\nfrom memgap.documents.records import LabDocument\n"
             "lab = LabDocument.from_dict(json.load(open(sys.argv[1])))\n"
             "before = 'memgap.report.html' in sys.modules\npage = lab._repr_html_()\n"
             "from memgap.report.html import lab_fragment\n"
             "print(json.dumps([before, page == lab_fragment(lab), page]))\n")
    out = subprocess.run([sys.executable, "-c", probe, SAVED_LAB], capture_output=True, text=True, env=child_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    before, same, page = json.loads(out.stdout)
    assert not before and same
    with open(SAVED_LAB) as f:
        raw = json.load(f)
    assert f'Verdict: <b class="verdict">{raw["verdict"]}</b>' in unescape(page)
