"""One snapshot as self-contained HTML: a fragment for notebooks (``Snapshot._repr_html_``)
and a page for the web middleware (``memgap.web``).

No script and no network: a stacked bar of the layers drawn as inline SVG, the layers table
(each figure also in a ``data-bytes`` attribute, exact, for programs reading the page), the
device memory per GPU and PyTorch's cache beside RSS where the snapshot has them, the
allocators, the memory cgroup and the findings, in the words the terminal report uses. Every
string from the process (paths, command lines) is escaped; the page embeds the snapshot's
JSON document with ``safe_json``, which cannot close its script block.
"""
from __future__ import annotations

from html import escape

from memgap.documents.json_value import JsonObject
from memgap.documents.snapshot import Snapshot
from memgap.report.cgroup import cgroup_lines
from memgap.report.gpu import device_text, heading, torch_lines
from memgap.report.html import LAYER_COLORS, safe_json
from memgap.report.terminal import LAYER_TITLES, allocator_lines
from memgap.report.units import mib, pct

_STYLE = """<style>
.memgap-snapshot { font: 13px system-ui, sans-serif; color: #222; }
.memgap-snapshot table { border-collapse: collapse; margin: 6px 0; }
.memgap-snapshot td, .memgap-snapshot th { border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }
.memgap-snapshot td:first-child, .memgap-snapshot th:first-child, .memgap-snapshot td.source { text-align: left; }
.memgap-snapshot .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; }
.memgap-snapshot tr.total { font-weight: bold; } .memgap-snapshot .dim { color: #888; }
.memgap-snapshot ul { margin: 4px 0; padding-left: 20px; }
</style>"""


def _bar(snap: Snapshot, width: int = 600, height: int = 18) -> str:
    """The layers stacked left to right on one bar as long as RSS (unexplained last, grey)."""
    parts = [(n, lay.resident or 0) for n, lay in snap.layers.items()] + [("unexplained", max(0, snap.unexplained))]
    total = max(1, sum(v for _, v in parts))
    x, rects = 0.0, []
    for name, value in parts:
        w = width * value / total
        color = LAYER_COLORS.get(name, "#cfcfcf")
        rects.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{color}">'
                     f'<title>{escape(LAYER_TITLES.get(name, name))}: {mib(value)} MiB</title></rect>')
        x += w
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="layers of RSS">'
            + "".join(rects) + "</svg>")


def _row(name: str, title: str, resident: int | None, rss: int, virtual: int | None, source: str,
         css: str = "") -> str:
    color = LAYER_COLORS.get(name, "#cfcfcf")
    figures = (f"<td>{mib(resident)}</td><td>{pct(resident, rss)}</td>" if resident is not None
               else '<td>-</td><td>-</td>')
    attrs = f' data-layer="{escape(name)}"' + (f' data-bytes="{resident}"' if resident is not None else "")
    attrs += f' class="{css}"' if css else ""
    return (f"<tr{attrs}>"
            f'<td><i class="swatch" style="background:{color}"></i>{escape(title)}</td>'
            f"{figures}<td>{mib(virtual)}</td><td class=\"source\">{escape(source)}</td></tr>")


def _layers_table(snap: Snapshot) -> str:
    rows = ["<tr><th>layer</th><th>resident MiB</th><th>of RSS</th><th>virtual MiB</th><th>measured from</th></tr>"]
    for name, layer in snap.layers.items():
        source = (layer.source or layer.derivation) if layer.measured else f"not measured: {layer.note}"
        rows.append(_row(name, LAYER_TITLES.get(name, name), layer.resident, snap.rss, layer.virtual, source,
                         "" if layer.measured else "dim"))
    rows.append(_row("unexplained", "unexplained", snap.unexplained, snap.rss, None, "VmRSS minus the layers"))
    rows.append(_row("rss", "RSS (VmRSS)", snap.rss, snap.rss, None, "/proc/PID/status", "total"))
    return "<table>" + "".join(rows) + "</table>"


def _list(title: str, items: list[str]) -> str:
    if not items:
        return ""
    return f"<p>{escape(title)}</p><ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>"


def _gpu(snap: Snapshot) -> str:
    """Device memory beside RSS, in the terminal's words: a line per GPU (its bytes in ``data-bytes``, exact),
    then PyTorch's cache where read from inside; nothing where the snapshot has no ``gpu``."""
    gpu = snap.gpu
    if gpu is None:
        return ""
    out = ""
    if gpu.devices:
        items = "".join(f'<li data-gpu="{d.index}"' + (f' data-bytes="{d.used}"' if d.used is not None else "")
                        + f">{escape(device_text(d))}</li>" for d in gpu.devices)
        out += f"<p>{escape(heading(gpu))}</p><ul>{items}</ul>"
    if gpu.torch is not None:
        first, *rest = torch_lines(gpu.torch)
        out += _list(first, [line.strip() for line in rest])
    return f'<div class="gpu">{out}</div>'


def snapshot_fragment(snap: Snapshot) -> str:
    """The snapshot as an HTML fragment (a ``div`` with its own scoped style), no script."""
    where = f"PID {snap.pid}" + (f" at {snap.phase}" if snap.phase else "")
    head = (f"<p><b>{escape(where)}: RSS {mib(snap.rss)} MiB</b> ({escape(snap.route)}, allocator "
            f"{escape(snap.allocator.name)})"
            + (f", PSS {mib(snap.pss)} MiB" if snap.pss is not None else "") + "</p>")
    free = snap.layers.get("allocator_free")
    releasable = free.detail.get("trim_releasable") if free is not None else None
    trim = (f"<p>A trim would release about {mib(releasable)} MiB.</p>" if releasable is not None else "")
    allocators = [f"{which} ({how})" if how else which for which, how in allocator_lines(snap.allocator)]
    cgroup = cgroup_lines(snap.cgroup, snap.rss, snap.pss) if snap.cgroup else []
    findings = [f.summary + (f" Remedy: {f.remedy}" if f.remedy else "") for f in snap.findings]
    return ('<div class="memgap-snapshot">' + _STYLE + head + _bar(snap) + _layers_table(snap) + trim + _gpu(snap)
            + _list("Allocators:", allocators) + _list("Memory cgroup:", [c.strip() for c in cgroup])
            + _list("Findings:", findings) + "</div>")


def snapshot_page(snap: Snapshot, document: JsonObject | None = None) -> str:
    """A whole page: the fragment, and the snapshot's JSON document (``document``, default
    ``snap.to_dict(regions=False)``) embedded in ``<script type="application/json"
    id="memgap-snapshot">`` for programs; nothing in the page runs."""
    doc = snap.to_dict(regions=False) if document is None else document
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>memgap: PID {snap.pid}</title></head><body>"
            + snapshot_fragment(snap)
            + f'<script type="application/json" id="memgap-snapshot">{safe_json(doc)}</script>'
            + "</body></html>\n")
