"""A self-contained HTML report of a lab: charts drawn in the page, no network.

The data goes in as JSON inside a ``<script type="application/json">`` block,
escaped so that nothing in it (a path, a command line) can close the block or
open a tag; the page's own script draws SVG charts from it:
RSS over time per variant on one axis, the layers of a chosen run stacked per
phase, and the variants side by side (idle median with min-max, after trim);
and, as text, the variants table (with each pattern's evidence on hover), the
verdict and the recommendation in every form the terminal gives it.
"""
from __future__ import annotations

import json
from html import escape
from typing import Any

from memgap.documents.json_value import JsonObject, JsonValue, shaped
from memgap.documents.lab_summary import Spread
from memgap.documents.records import LabDocument
from memgap.documents.snapshot import LATER_LAYERS
from memgap.report.lab import (
    across_line,
    apply_lines,
    cgroup_lines,
    chosen_lines,
    objective_lines,
    pattern_evidence,
    recommended,
    table_rows,
    too_slow_line,
    variant_columns,
)

LAYER_COLORS = {
    "files": "#9e9e9e", "shared_memory": "#78909c", "gpu_driver": "#558b2f", "pinned_host": "#9ccc65",
    "python_objects": "#3f51b5", "pymalloc_free": "#9fa8da",
    "runtime_heap": "#6a1b9a", "runtime_metadata": "#ce93d8", "allocator_in_use": "#e65100", "allocator_free": "#ffb74d", "library_allocators": "#fdd835", "stacks": "#00897b", "static_data": "#a1887f", "other_anon": "#8d6e63",
}


def safe_json(data: Any) -> str:
    """JSON that cannot end a <script> element or start markup, whatever strings it holds."""
    text = json.dumps(data, separators=(",", ":"), default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _chart_data(lab: LabDocument) -> JsonObject:
    """Only what the page shows (the runs' timelines and layers, not their every figure): keeps it
    small. The runs and variants go as the document writes them (``to_dict``), for the page's script."""
    runs: list[JsonValue] = [{"variant": r.variant, "rep": r.rep, "params": r.params, "status": r.status.value,
                              "timeline": r.timeline, "layers": shaped(r.layers)} for r in lab.runs]
    return {"cmd": lab.cmd, "machine": shaped(lab.machine), "reps": lab.reps, "verdict": lab.verdict,
            "columns": [c.header for c in variant_columns(lab)], "rows": table_rows(lab),
            "too_slow": too_slow_line(lab), "warnings": chosen_lines(lab) + cgroup_lines(lab) + objective_lines(lab)
                                                           + lab.warnings,
            "apply": apply_lines(lab.recommendation) if lab.recommendation else [],
            "across": across_line(lab),
            "evidence": {v.spec: pattern_evidence(lab, v.spec) for v in lab.variants},
            "recommendation": recommended(lab), "cell": lab.cell,
            "variants": [{"spec": v.spec, "idle": v.idle, "after_trim": v.after_trim, "peak": v.peak,
                          "slowdown": v.slowdown} for v in lab.variants],
            "runs": runs, "colors": _colors(lab)}


def _colors(lab: LabDocument) -> dict[str, str]:
    """The layers' colours, a layer added since older labs were saved only where a run has it (their page
    stays as it was)."""
    held = {name for r in lab.runs for phase in r.layers for name in phase["layers"]}
    return {name: color for name, color in LAYER_COLORS.items() if name not in LATER_LAYERS or name in held}


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>memgap lab</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
svg { background: #fafafa; border: 1px solid #ddd; }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
code { background: #f0f0f0; padding: 1px 4px; }
table { border-collapse: collapse; } td, th { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
td:first-child, th:first-child, td:nth-last-child(-n+2) { text-align: left; }
tr.recommended { font-weight: bold; } pre { background: #f6f6f6; padding: 8px; white-space: pre-wrap; }
</style></head>
<body>
<h1>memgap lab</h1>
<p>Workload: <code id="cmd"></code></p>
<p id="machine"></p>
<p>Verdict: <span id="verdict"></span></p>
<p id="across"></p>
<pre id="apply"></pre>
<h2>Variants (MiB: median, min-max over the repetitions)</h2>
<table id="variants-table"></table>
<p id="too-slow"></p>
<ul id="warnings"></ul>
<h2>RSS over time, one run per variant (repetition 1)</h2>
<svg id="timeline" width="900" height="320"></svg>
<div class="legend" id="timeline-legend"></div>
<h2>Layers per phase of one run</h2>
<select id="run-choice"></select>
<svg id="layers" width="900" height="320"></svg>
<div class="legend" id="layers-legend"></div>
<h2>Variants side by side: idle RSS (median, min-max) and after one trim</h2>
<svg id="variants" width="900" height="40"></svg>
<script type="application/json" id="lab-data">__DATA__</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("lab-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const MiB = 1048576;
const palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#4e342e", "#ad1457",
                 "#283593", "#558b2f", "#f9a825", "#37474f"];
function el(tag, attrs, parent) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}
function text(parent, x, y, s, attrs) {
  const t = el("text", Object.assign({x: x, y: y, "font-size": 11}, attrs || {}), parent);
  t.textContent = s;
  return t;
}
function legend(id, items) {
  const box = document.getElementById(id);
  for (const [label, color] of items) {
    const span = document.createElement("span");
    const sw = document.createElement("i");
    sw.className = "swatch"; sw.style.background = color;
    span.appendChild(sw); span.appendChild(document.createTextNode(label));
    box.appendChild(span);
  }
}
function axes(svg, w, h, m, xmax, ymax, xlabel) {
  el("line", {x1: m, y1: h - m, x2: w - 10, y2: h - m, stroke: "#888"}, svg);
  el("line", {x1: m, y1: 10, x2: m, y2: h - m, stroke: "#888"}, svg);
  for (let i = 0; i <= 4; i++) {
    const y = h - m - (h - m - 10) * i / 4;
    text(svg, 4, y + 4, (ymax * i / 4 / MiB).toFixed(0) + " MiB");
  }
  text(svg, w - 10, h - 8, xlabel, {"text-anchor": "end"});
}
document.getElementById("cmd").textContent = data.cmd.join(" ");
document.getElementById("machine").textContent =
  `${data.machine.cpus} CPUs, ${data.machine.glibc}, Python ${data.machine.python}; ${data.reps} repetitions`;
document.getElementById("verdict").textContent = data.verdict;

(function table() {
  const tbl = document.getElementById("variants-table");
  const head = document.createElement("tr");
  for (const c of data.columns) { const th = document.createElement("th"); th.textContent = c; head.appendChild(th); }
  tbl.appendChild(head);
  for (const row of data.rows) {
    const tr = document.createElement("tr");
    if (row[0] === data.recommendation) tr.className = "recommended";
    row.forEach((cell, i) => {
      const td = document.createElement("td");
      td.textContent = cell;
      if (data.columns[i] === "pattern") td.title = (data.evidence[row[0]] || []).join("\\n");
      tr.appendChild(td);
    });
    tbl.appendChild(tr);
  }
  document.getElementById("too-slow").textContent = data.too_slow;
  document.getElementById("across").textContent = data.across;
  document.getElementById("apply").textContent = data.apply.join("\\n");
  const ul = document.getElementById("warnings");
  for (const w of data.warnings) { const li = document.createElement("li"); li.textContent = w; ul.appendChild(li); }
})();

const sameCell = r => JSON.stringify(r.params) === JSON.stringify(data.cell);
(function timeline() {
  const svg = document.getElementById("timeline"), w = 900, h = 320, m = 60;
  const runs = data.runs.filter(r => r.rep === 1 && sameCell(r) && r.timeline.length);
  const tmax = Math.max(1e-9, ...runs.map(r => r.timeline[r.timeline.length - 1][0]));
  const ymax = Math.max(1, ...runs.map(r => Math.max(...r.timeline.map(p => p[1]))));
  axes(svg, w, h, m, tmax, ymax, tmax.toFixed(1) + " s");
  const items = [];
  runs.forEach((r, i) => {
    const color = palette[i % palette.length];
    const pts = r.timeline.map(p => [m + (w - m - 10) * p[0] / tmax, h - m - (h - m - 10) * p[1] / ymax]);
    el("polyline", {points: pts.map(p => p.join(",")).join(" "), fill: "none", stroke: color,
                    "stroke-width": 1.5, "data-variant": r.variant}, svg);
    items.push([r.variant, color]);
  });
  legend("timeline-legend", items);
})();

function drawLayers(run) {
  const svg = document.getElementById("layers"), w = 900, h = 320, m = 60;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const phases = run.layers;
  const ymax = Math.max(1, ...phases.map(p => p.rss));
  axes(svg, w, h, m, phases.length, ymax, "phase");
  const bw = (w - m - 20) / Math.max(1, phases.length);
  phases.forEach((p, i) => {
    let y = h - m;
    for (const [name, color] of Object.entries(data.colors)) {
      const v = p.layers[name] || 0;
      const bh = (h - m - 10) * v / ymax;
      y -= bh;
      el("rect", {x: m + i * bw + 4, y: y, width: Math.max(1, bw - 8), height: bh, fill: color,
                  class: "layer", "data-layer": name}, svg);
    }
    text(svg, m + i * bw + bw / 2, h - m + 14, p.phase, {"text-anchor": "middle"});
  });
}
(function layers() {
  const choice = document.getElementById("run-choice");
  const runs = data.runs.filter(r => r.layers.length);
  runs.forEach((r, i) => {
    const opt = document.createElement("option");
    opt.value = i;
    opt.textContent = `${r.variant} #${r.rep}` + (Object.keys(r.params).length ? " " + JSON.stringify(r.params) : "");
    choice.appendChild(opt);
  });
  choice.addEventListener("change", () => drawLayers(runs[choice.value]));
  if (runs.length) drawLayers(runs[0]);
  legend("layers-legend", Object.entries(data.colors));
})();

(function variants() {
  const svg = document.getElementById("variants"), left = 330, row = 26, w = 900;
  const vs = data.variants.filter(v => v.idle);
  svg.setAttribute("height", 20 + row * vs.length);
  const xmax = Math.max(1, ...vs.map(v => v.idle[2]));
  vs.forEach((v, i) => {
    const y = 10 + i * row, scale = x => left + (w - left - 60) * x / xmax;
    const label = v.spec + (v.spec === data.recommendation ? "  (recommended)" : "");
    text(svg, left - 8, y + 14, label, {"text-anchor": "end", "font-weight": v.spec === data.recommendation ? "bold" : "normal"});
    el("rect", {x: left, y: y + 3, width: scale(v.idle[0]) - left, height: 14, fill: "#90caf9", class: "bar",
                "data-variant": v.spec}, svg);
    el("line", {x1: scale(v.idle[1]), x2: scale(v.idle[2]), y1: y + 10, y2: y + 10, stroke: "#0d47a1",
                "stroke-width": 2, class: "range"}, svg);
    if (v.after_trim) el("circle", {cx: scale(v.after_trim[0]), cy: y + 10, r: 4, fill: "#e65100",
                                    class: "after-trim"}, svg);
    text(svg, scale(v.idle[2]) + 6, y + 14, (v.idle[0] / MiB).toFixed(0) + " MiB");
  });
})();
</script>
</body></html>
"""


def render_html(lab: LabDocument) -> str:
    """The report page for a lab document."""
    return PAGE.replace("__DATA__", safe_json(_chart_data(lab)))


_FRAGMENT_STYLE = """<style>
.memgap-lab { font: 13px system-ui, sans-serif; color: #222; }
.memgap-lab table { border-collapse: collapse; margin: 6px 0; }
.memgap-lab td, .memgap-lab th { border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; white-space: nowrap; }
.memgap-lab td:first-child, .memgap-lab th:first-child, .memgap-lab td:nth-last-child(-n+2) { text-align: left; }
.memgap-lab tr.recommended { font-weight: bold; }
.memgap-lab pre { background: #f6f6f6; padding: 8px; white-space: pre-wrap; }
</style>"""


def _median(value: Spread | None) -> str:
    """A variant's median in bytes, for a data- attribute ("" where it has none)."""
    return str(value[0]) if value else ""


def _variants_table(lab: LabDocument) -> str:
    """The variants table as the terminal prints it; each row also carries the variant's idle,
    after-trim and peak medians (and its GPU memory at idle, where recorded) in exact bytes (data- attributes),
    for programs reading it."""
    head = "<tr>" + "".join(f"<th>{escape(c.header)}</th>" for c in variant_columns(lab)) + "</tr>"
    rows = []
    for v, cells in zip(lab.variants, table_rows(lab), strict=True):
        attrs = (f' data-variant="{escape(v.spec)}" data-idle="{_median(v.idle)}"'
                 f' data-after-trim="{_median(v.after_trim)}" data-peak="{_median(v.peak)}"'
                 + (f' data-gpu-idle="{_median(v.gpu_idle)}"' if v.gpu_idle else "")  # a GPU process's device memory
                 + (' class="recommended"' if v.spec == recommended(lab) else ""))
        rows.append(f"<tr{attrs}>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return "<table>" + head + "".join(rows) + "</table>"


def lab_fragment(lab: LabDocument) -> str:
    """A lab document as an HTML fragment (a ``div`` with its own scoped style; no script, no
    network), for notebooks: the workload, the verdict, the variants table and the lines that
    apply the recommendation, in the words of the terminal's report."""
    rec = lab.recommendation
    notes = [too_slow_line(lab), across_line(lab), *chosen_lines(lab), *cgroup_lines(lab), *objective_lines(lab),
             *lab.warnings]
    return ('<div class="memgap-lab">' + _FRAGMENT_STYLE
            + f"<p>memgap lab of <code>{escape(' '.join(lab.cmd))}</code>, {lab.reps} repetitions</p>"
            + f'<p>Verdict: <b class="verdict">{escape(lab.verdict)}</b></p>'
            + _variants_table(lab)
            + "".join(f"<p>{escape(n)}</p>" for n in notes if n)
            + (f"<pre>{escape(chr(10).join(apply_lines(rec)))}</pre>" if rec else "")
            + "</div>")
