"""The HTML lab report: what headless Chromium shows of it, hostile strings included (its embedded JSON
against them: tests/unit/test_html_json.py)."""
import re
import shutil
import subprocess
import sys

import pytest

from helpers import memgap
from memgap.documents.snapshot import LAYER_NAMES
from memgap.report.html import LAYER_COLORS

HOSTILE = '</script><b id="pwn">x</b>\u2028&amp;'


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(not _chromium(), reason="Debian's chromium is not installed")
def test_report_renders_its_charts_in_headless_chromium(tmp_path):
    script = tmp_path / "work.py"
    script.write_text("import sys, memgap\nmemgap.phase('post-import')\nkeep = [bytearray(50000) for _ in range(400)]\n"
                      "memgap.phase('loaded')\ndel keep[::2]\nmemgap.phase('idle')\n")
    html = tmp_path / "lab.html"
    variants = ["glibc", "glibc:trim=idle", "glibc:arena_max=2"]
    args = ["lab", "--reps", "2", "--html", str(html), "--dir", str(tmp_path / "runs")]
    for v in variants:
        args += ["--variant", v]
    proc = memgap(*args, "--", sys.executable, str(script), HOSTILE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = html.read_text()
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing fetched from a network
    dom = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", html.as_uri()],
        capture_output=True, text=True, timeout=120).stdout
    assert '<b id="pwn">' not in dom  # the command line stayed text, no element
    cmd = re.search(r'<code id="cmd">(.*?)</code>', dom, re.S).group(1)
    assert "&lt;/script&gt;&lt;b id=\"pwn\"&gt;" in cmd
    # one line per variant on the RSS chart, one bar per variant side by side
    assert sorted(re.findall(r'<polyline[^>]*data-variant="([^"]+)"', dom)) == sorted(variants)
    assert sorted(re.findall(r'<rect[^>]*class="bar"[^>]*data-variant="([^"]+)"', dom)) == sorted(variants)
    # the chosen run's layers stacked for each of its phases (post-import, loaded, idle, after-trim, exit)
    layer_rects = re.findall(r'<rect[^>]*class="layer"', dom)
    assert list(LAYER_COLORS) == list(LAYER_NAMES)  # a colour for every layer, in the tables' order
    # no GPU context, no library's own allocator: those layers are shown only where a process holds them
    held = [n for n in LAYER_NAMES if n not in ("gpu_driver", "pinned_host", "library_allocators")]
    assert len(layer_rects) == len(held) * 5
    verdict = re.search(r'id="verdict">([^<]*)<', dom).group(1)
    assert (verdict and "MiB" in verdict) or "keep the defaults" in verdict
    # the variants table as text: a header and one row per variant, the recommended one marked
    table = re.search(r'<table id="variants-table">(.*?)</table>', dom, re.S).group(1)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
    assert len(rows) == 1 + len(variants)
    assert sorted(re.findall(r"<tr[^>]*><td>([^<]+)</td>", table)) == sorted(variants)
    recommended = re.findall(r'<tr class="recommended"><td>([^<]+)</td>', table)
    applied = re.search(r'<pre id="apply">(.*?)</pre>', dom, re.S).group(1)
    if "keep the defaults" in verdict:
        assert recommended == [] and applied == ""
    else:
        assert len(recommended) == 1 and applied.startswith(f"Apply {recommended[0]}:")
        assert "environment:" in applied and "Dockerfile:" in applied and "systemd:" in applied
    assert re.search(r'id="too-slow">Too slow: beyond x1\.\d\d', dom)
