"""The lab on a GPU process (issue 33): a run's figures carry the tree's device memory where its samples held
some (NVML, per process), the lab's tables show it beside RSS, and a lab that runs a setting of PyTorch's CUDA
cache is judged on it, said in the verdict's words; without a GPU nothing changes. On run documents and lab
runs made by hand: the device lane (scripts/gpu_check.sh) runs a real one."""
import io

from memgap.allocators.variants import parse_variant
from memgap.documents.records import LabDocument, RunDocument, RunFigures
from memgap.lab.figures import gpu_of_tree, run_figures
from memgap.lab.objective import decide_objective

MiB = 1 << 20
EXPANDABLE = "torch:expandable_segments=True"


def _timeline(gpu):
    """A driver (pid 1, no GPU) and a trainer (pid 2): ``gpu`` is the trainer's device MiB per round (None: no
    figure that round: its CUDA context not open yet), 0.1 s apart."""
    out = []
    for k, used in enumerate(gpu):
        t = round(k * 0.1, 4)
        out.append({"t": t, "pid": 1, "rss": 20 * MiB})
        out.append({"t": t, "pid": 2, "rss": 900 * MiB, **({"gpu": used * MiB} if used is not None else {})})
    return out


def _run(timeline, idle_at=None):
    snap = {"phase": "quiet", "rss": 900 * MiB, "layers": {}, "status": {}, "allocator": {"name": "glibc"},
            "pid": 2, "unexplained": 0, "route": "outside", "time": 1000.0 + (idle_at or 0.5)}
    idle = {"rss": 900 * MiB, "rule": "quiet", "label": "quiet", "time": 1000.0 + idle_at} if idle_at else None
    proc = {"pid": 2, "cmd": ["python", "loop.py"], "snapshots": [snap], **({"idle": idle} if idle else {})}
    return RunDocument.from_dict({"schema": "memgap.run/1", "start": 1000.0, "exit_code": 0, "duration": 1.0,
                                  "timeline": timeline, "processes": [proc]})


def test_the_trees_device_memory_at_its_idle_and_its_peak_from_the_samples():
    run = _run(_timeline([None, 500, 4000, 3600, 3600, 3500]))
    assert gpu_of_tree(run, 1000.0 + 0.35) == (3600 * MiB, 4000 * MiB)  # the last round at or before the idle
    assert gpu_of_tree(run, None) == (3500 * MiB, 4000 * MiB)  # no idle: the last round
    assert gpu_of_tree(run, 1000.0 - 1) == (500 * MiB, 4000 * MiB)  # an idle before any figure: the first
    two = _timeline([1000, 3000]) + [{"t": 0.1, "pid": 3, "rss": MiB, "gpu": 700 * MiB}]  # a second process
    assert gpu_of_tree(_run(two), None) == (3700 * MiB, 3700 * MiB)  # summed per round
    assert gpu_of_tree(_run(_timeline([None, None])), None) == (None, None)  # no GPU


def test_a_runs_figures_carry_device_memory_only_where_sampled():
    gpu = run_figures(_run(_timeline([None, 500, 4000, 3600, 3600]), idle_at=0.35), EXPANDABLE, 1, 1, 0.0)
    assert (gpu.gpu_idle, gpu.gpu_peak) == (3600 * MiB, 4000 * MiB)
    assert gpu.to_dict()["gpu_idle"] == 3600 * MiB and RunFigures.from_dict(gpu.to_dict()) == gpu
    plain = run_figures(_run(_timeline([None] * 5), idle_at=0.35), "glibc", 1, 1, 0.0)
    assert (plain.gpu_idle, plain.gpu_peak) == (None, None)
    assert not {"gpu_idle", "gpu_peak"} & set(plain.to_dict())  # written as an earlier memgap wrote it


def _lab_run(spec, rep, gpu_idle, idle=900, wall=3.0):
    return RunFigures(spec, rep, 0, "ok", wall=wall, idle=idle * MiB, peak=1000 * MiB,
                      gpu_idle=gpu_idle * MiB if gpu_idle is not None else None,
                      gpu_peak=(gpu_idle + 500) * MiB if gpu_idle is not None else None)


def test_a_setting_of_the_gpus_memory_is_judged_on_it_where_the_baseline_recorded_some():
    gpu = [_lab_run("glibc", 1, 4000), _lab_run("glibc", 2, 4100)]
    objective, why = decide_objective("", False, gpu, device=True)
    assert objective == "gpu" and "changes device memory, not RSS" in why and "(2 of 2)" in why
    assert decide_objective("", False, gpu, device=False)[0] == "idle"  # no such setting in the lab
    assert decide_objective("", False, [_lab_run("glibc", 1, None)], device=True)[0] == "idle"  # no GPU
    assert decide_objective("idle", False, gpu, device=True) == ("idle", "chosen with --objective")
    assert parse_variant(EXPANDABLE).device_memory and not parse_variant("glibc:arena_max=2").device_memory
    assert not parse_variant("arrow:pool=system").device_memory


def _lab(runs, specs):
    from memgap.lab.document import lab_document
    from memgap.lab.state import LabOptions, LabState

    options = LabOptions(cmd=("python", "loop.py"), variants=tuple(parse_variant(s) for s in specs), reps=2,
                         lab_dir="/x")
    state = LabState.start(options)
    state.results = runs
    return lab_document(options, state, 1.0)


def test_the_lab_compares_pytorchs_setting_on_device_memory_and_shows_it_beside_rss():
    """expandable segments: RSS the same (900 MiB), the GPU's memory 3,600 against 4,050 MiB: recommended on
    it, the verdict saying so; the table carries both."""
    from memgap.report.html import lab_fragment, render_html
    from memgap.report.lab import markdown_table, render_lab, table_rows

    runs = [r for rep in (1, 2) for r in (_lab_run("glibc", rep, 4000 + 100 * rep), _lab_run(EXPANDABLE, rep, 3600))]
    doc = _lab(runs, ("glibc", EXPANDABLE))
    data = doc.to_dict()
    assert data["objective"] == "gpu" and data["recommendation"]["variant"] == EXPANDABLE
    assert data["verdict"].startswith("idle GPU memory (the tree's device memory as the driver counts it, NVML; "
                                      "not RSS) 3600 MiB (range 3600-3600) against the baseline's 4150 (4100-4200)")
    assert {v["spec"]: v["gpu_idle"][0] for v in data["variants"]} == {"glibc": 4150 * MiB, EXPANDABLE: 3600 * MiB}
    again = LabDocument.from_dict(data)
    assert again.to_dict() == data
    rows = {row[0]: row for row in table_rows(again)}
    assert "900 (900-900)" in rows[EXPANDABLE] and "3600 (3600-3600)" in rows[EXPANDABLE]  # RSS and GPU idle
    assert "4100 (4100-4100)" in rows[EXPANDABLE]  # its GPU peak
    out = io.StringIO()
    render_lab(again, out, width=200)
    text = " ".join(out.getvalue().split())
    assert "GPU idle" in text and "GPU peak" in text
    assert "Judged by the tree's GPU memory at idle (device memory as the driver counts it, NVML" in text
    assert "(--objective mean, idle, peak or gpu chooses)" in text
    assert "PYTORCH_ALLOC_CONF=expandable_segments:True" in text  # the lines that apply it
    header, _, *lines = markdown_table(again).splitlines()  # Markdown and HTML share the columns and cells
    heads = [c.strip() for c in header.strip("|").split("|")]
    assert heads[heads.index("idle") + 1:heads.index("idle") + 3] == ["GPU idle", "GPU peak"]
    assert all(len(line.strip("|").split("|")) == len(heads) for line in lines)
    assert '"GPU idle"' in render_html(again)  # the page's table, drawn from its data
    fragment = lab_fragment(again)  # a notebook's
    assert f'data-gpu-idle="{3600 * MiB}' in fragment and "<th>GPU idle</th>" in fragment  # a median: may be x.0


def test_without_a_gpu_the_lab_and_its_report_are_as_they_were():
    from memgap.report.html import lab_fragment, render_html
    from memgap.report.lab import render_lab

    runs = [r for rep in (1, 2) for r in (_lab_run("glibc", rep, None, idle=900),
                                          _lab_run("glibc:arena_max=2", rep, None, idle=600))]
    data = _lab(runs, ("glibc", "glibc:arena_max=2")).to_dict()
    assert data["recommendation"]["variant"] == "glibc:arena_max=2" and data["verdict"].startswith("idle RSS 600")
    assert all(not {"gpu_idle", "gpu_peak"} & set(v) for v in data["variants"])
    assert all(not {"gpu_idle", "gpu_peak"} & set(r) for r in data["runs"])
    out = io.StringIO()
    render_lab(LabDocument.from_dict(data), out, width=200)
    assert "GPU" not in out.getvalue()
    assert "GPU" not in render_html(LabDocument.from_dict(data)) + lab_fragment(LabDocument.from_dict(data))
