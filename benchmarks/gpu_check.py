"""Issue 33's check on a machine with an NVIDIA GPU, PyTorch and nvidia-smi (the GPU lane: not run by
scripts/test.sh). Run it through scripts/gpu_check.sh, which puts src/ on the path:

    sh scripts/gpu_check.sh [OUT_DIR]

1. A PyTorch process as in tests/fixtures/torch-2.11-cuda13/cuda (a 4 GiB GPU tensor, a matmul, 1 GiB of pinned
   host memory), which does not import memgap: `inspect --json` names its pinned memory and the driver's mappings
   (against its smaps), its layers add up, and its device memory is within 1% of nvidia-smi's per-process figure;
   `top --iterations 1` and `serve-metrics` give the same figure. Issue 30's look: `memgap inspect PID` timed
   first (private folders empty), second, first with the reads on one core, beside a small process's look,
   3 interleaved rounds (GPU_PROFILE=1: a cProfile of a first and a second look too).
2. The same program under `memgap run`: its timeline's samples carry its device memory (within 1% of the
   nvidia-smi figure the program read of itself just before it exits), and its in-process exit snapshot's PyTorch
   cache equals the torch.cuda.memory_stats() the program printed at that moment.
   The lab's default set, asked of that run's document, adds torch:expandable_segments=True (the process has a
   CUDA context and maps PyTorch's CUDA build).
3. A fragmenting loop (tests/programs/torch_fragment.py: rounds of 200 tensors of 12-84 MiB, one in three kept,
   the older half of those dropped each round) under `memgap run`, by default and with
   PYTORCH_ALLOC_CONF=expandable_segments:True: its cache read at exit, and the loop's step time beside each.
4. `memgap lab` on the same loop, the baseline against torch:expandable_segments=True (3 repetitions, its rate
   as --metric): judged by the tree's GPU memory at idle (the gpu objective), every run recording device
   memory; the verdict, each variant's device memory (idle and peak), idle RSS and step time are written out.
5. Issue 31's data loader on PyTorch's own DataLoader (tests/programs/torch_loader.py: 1,000,000 dicts, 4
   persistent forked workers, 2 epochs) under `memgap run` with no option: each worker's parent and copies,
   and the words that name them.
6. Many cores (not issue 33's): the lab on the 32-thread decode pool of seed 000, four glibc variants.

GPU_STEPS=holder,run,... runs only the steps named (a rerun in a short device lease).

Every figure goes to OUT_DIR/gpu_check.json, each command's output to OUT_DIR/<step>.stdout and .stderr; each
step's seconds are in the JSON (the whole lane took 121 s on a 16-core H200 machine, 2026-11-28);
the script exits 1 where a check failed, and says which.
"""
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENT = os.path.join(ROOT, "tests", "programs", "torch_fragment.py")
EXPANDABLE = "torch:expandable_segments=True"
LOADER = [os.path.join(ROOT, "tests", "programs", "torch_loader.py")]  # the program and its arguments
OUT = {"dir": tempfile.gettempdir()}  # where each command's output is kept (main sets it)
HOLDER = r"""
import subprocess, sys, json, os, torch
x = torch.ones(4 << 30, dtype=torch.uint8, device="cuda")            # a 4 GiB GPU tensor
a = torch.randn(2048, 2048, device="cuda"); b = a @ a                  # cuBLAS loaded
pinned = torch.ones(1 << 30, dtype=torch.uint8, pin_memory=True)       # 1 GiB of pinned host memory
torch.cuda.synchronize()
print("ready", flush=True)
if len(sys.argv) > 1:  # under memgap run: say its own figures, then exit (memgap reads it in-process at exit)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    used = [int(l.split(",")[1]) for l in smi.splitlines() if l.split(",")[0].strip() == str(os.getpid())]
    print("FIGURES " + json.dumps({"smi_mib": used[0] if used else None, "stats": torch.cuda.memory_stats(),
                                   "host": dict(torch.cuda.host_memory_stats())}), flush=True)
else:
    sys.stdin.readline()
"""


def memgap(*args, name="", timeout=150, **kw):
    """memgap from this tree; its output kept as OUT_DIR/<name>.stdout and .stderr."""
    done = subprocess.run([sys.executable, "-m", "memgap", *args], capture_output=True, text=True, timeout=timeout,
                          **kw)
    if name:
        for what, text in (("stdout", done.stdout), ("stderr", done.stderr)):
            with open(os.path.join(OUT["dir"], f"{name}.{what}"), "w") as fh:
                fh.write(text)
    return done


def smi_mib(pid):
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return next((int(line.split(",")[1]) for line in out.splitlines() if line.split(",")[0].strip() == str(pid)),
                None)


def smaps_rss(pid, test):
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split(None, 5)
                inside = test(parts[5].strip() if len(parts) == 6 else "")
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


class Checks:
    def __init__(self):
        self.failed, self.figures = [], {}

    def check(self, name, ok, **figures):
        self.figures[name] = {"ok": bool(ok), **figures}
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {figures}", flush=True)
        if not ok:
            self.failed.append(name)


def within(got, want, share=0.01):
    return got is not None and want is not None and abs(got - want) <= share * want


def check_holder(c):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        pid, smi = proc.pid, smi_mib(proc.pid)
        out = memgap("inspect", str(pid), "--json", "-", name="inspect")
        snap = json.loads(out.stdout)
        layers = {k: v["resident"] for k, v in snap["layers"].items()}
        used = (snap.get("gpu") or {}).get("devices", [{}])[0].get("used")
        c.check("inspect: device memory within 1% of nvidia-smi", within(used, smi * MiB if smi else None),
                memgap=used, nvidia_smi_mib=smi)
        zero = smaps_rss(pid, lambda p: p == "/dev/zero (deleted)")
        driver = smaps_rss(pid, lambda p: p.startswith("/dev/nvidia"))
        c.check("inspect: pinned_host against the /dev/zero mappings' Rss", within(layers.get("pinned_host"), zero),
                memgap=layers.get("pinned_host"), smaps=zero)
        c.check("inspect: gpu_driver against the /dev/nvidia* mappings' Rss",
                within(layers.get("gpu_driver"), driver, 0.05), memgap=layers.get("gpu_driver"), smaps=driver)
        c.check("inspect: the layers add up", abs(snap["unexplained"]) <= 0.02 * snap["rss"],
                unexplained=snap["unexplained"], rss=snap["rss"], shared_memory=layers.get("shared_memory"))
        time_looks(c, pid)
        check_metrics(c, pid, smi)
        if os.environ.get("GPU_PROFILE"):
            profile_look(pid)
        top = memgap("top", str(pid), "--iterations", "1", "--interval", "1", name="top")
        shown = re.search(r"GPU 0 [^:]*: ([0-9.]+) MiB", top.stdout)
        c.check("top: device memory within 1% of nvidia-smi", shown and within(float(shown[1]), smi),
                top_mib=shown and float(shown[1]), nvidia_smi_mib=smi, stderr=top.stderr[-300:])
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def check_metrics(c, pid, smi):
    """`serve-metrics PID` (a collection at each scrape): memgap_gpu_memory_bytes within 1% of nvidia-smi."""
    server = subprocess.Popen([sys.executable, "-m", "memgap", "serve-metrics", str(pid), "--port", "0", "--refresh",
                               "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = re.search(r"http://\S+", server.stdout.readline())
        body = urllib.request.urlopen(url[0], timeout=60).read().decode() if url else ""
    finally:
        server.terminate()
        server.wait(timeout=30)
    with open(os.path.join(OUT["dir"], "metrics.txt"), "w") as fh:
        fh.write(body)
    shown = re.search(r'^memgap_gpu_memory_bytes\{[^}]*gpu="0"[^}]*\} ([0-9.e+]+)$', body, re.M)
    c.check("serve-metrics: memgap_gpu_memory_bytes within 1% of nvidia-smi", shown and
            within(float(shown[1]), smi * MiB if smi else None), metric=shown and float(shown[1]),
            nvidia_smi_mib=smi)


def profile_look(pid):
    """cProfile of a first look (memgap's private folders empty) and of a second, their costliest calls to
    OUT_DIR/look_profile.txt."""
    import pstats

    env = {**os.environ, "TMPDIR": tempfile.mkdtemp(prefix="memgap-prof-")}
    with open(os.path.join(OUT["dir"], "look_profile.txt"), "w") as fh:
        for which in ("first", "second"):
            stats = os.path.join(OUT["dir"], f"look_{which}.prof")
            subprocess.run([sys.executable, "-m", "cProfile", "-o", stats, "-m", "memgap", "inspect", str(pid)],
                           env=env, capture_output=True, timeout=120)
            fh.write(f"=== {which} look\n")
            pstats.Stats(stats, stream=fh).sort_stats("cumulative").print_stats(45)
            pstats.Stats(stats, stream=fh).sort_stats("tottime").print_stats(25)


def _timed(argv, env=None, timeout=90):
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    return time.perf_counter() - began, done.returncode


def time_looks(c, pid):
    """Issue 30: one look (`memgap inspect PID`, a new memgap process each time) at the PyTorch CUDA process,
    first with memgap's private folders empty (a fresh TMPDIR) and second with them as the first left them,
    beside a small Python process's look (the unit) and reading the kernel's own smaps; interleaved, 3 rounds."""
    small = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.readline()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    small.stdout.readline()
    look = [sys.executable, "-m", "memgap", "inspect"]
    one_core = [sys.executable, "-c", "import sys; import memgap.sources.elf_ahead as a; a.PARALLEL_LEAST = 1 << 62; "
                "from memgap.cli import main; sys.exit(main(sys.argv[1:]))", "inspect"]  # the reads not shared out
    rounds = {"small": [], "first": [], "second": [], "first_one_core": [], "smaps_cat": [], "exit_codes": []}
    try:
        for _ in range(3):
            fresh = tempfile.mkdtemp(prefix="memgap-look-")
            env = {**os.environ, "TMPDIR": fresh}
            for key, argv, e in (("small", look + [str(small.pid)], None), ("first", look + [str(pid)], env),
                                 ("second", look + [str(pid)], env),
                                 ("first_one_core", one_core + [str(pid)],
                                  {**os.environ, "TMPDIR": tempfile.mkdtemp(prefix="memgap-look-")}),
                                 ("smaps_cat", ["cat", f"/proc/{pid}/smaps"], None)):
                took, code = _timed(argv, env=e)
                rounds[key].append(round(took, 3))
                rounds["exit_codes"].append(code)
    finally:
        small.stdin.close()
        small.wait(timeout=30)
    med = {k: sorted(v)[1] for k, v in rounds.items() if k != "exit_codes"}
    c.check("look (issue 30): one look at the PyTorch CUDA process under a second", med["first"] < 1.0 and
            not any(rounds["exit_codes"]), medians_s=med, first_x_small=round(med["first"] / med["small"], 2),
            second_x_small=round(med["second"] / med["small"], 2), rounds=rounds, cpus=os.cpu_count())


def timeline_figures(run):
    """Samples against the interval the run asked for (issue 30's timeline): count, span, largest gap."""
    first = run["processes"][0]["pid"] if run.get("processes") else None
    times = [s["t"] for s in run.get("timeline", []) if s.get("pid") == first]
    interval = run.get("interval")
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return {"samples": len(times), "span_s": round(times[-1] - times[0], 2) if times else None,
            "interval_s": interval, "max_gap_s": round(max(gaps), 3) if gaps else None}


def run_json(out_dir, name, program, *args, env=None):
    """``memgap run`` of a program (its source with -c, else its path), its document as JSON."""
    path = os.path.join(out_dir, f"{name}.json")
    argv = [program] if os.path.isfile(program) else ["-c", program]
    done = memgap("run", "--json", path, "--", sys.executable, *argv, *args, env=env, name=name)
    with open(path) as fh:
        return done, json.load(fh)


def check_run(c, out_dir):
    done, run = run_json(out_dir, "run_holder", HOLDER, "exit")
    said = json.loads(done.stdout.split("FIGURES ", 1)[1].splitlines()[0])
    samples = [s["gpu"] for s in run["timeline"] if "gpu" in s]
    c.check("run: the timeline's last device memory within 1% of nvidia-smi's", samples and
            within(samples[-1], said["smi_mib"] * MiB), last=samples[-1] if samples else None,
            nvidia_smi_mib=said["smi_mib"], samples=len(samples), timeline=timeline_figures(run))
    exits = [s for p in run["processes"] for s in p["snapshots"] if s.get("phase") == "exit" and s.get("gpu")]
    torch = (exits[-1]["gpu"] or {}).get("torch") if exits else None
    stats = said["stats"]
    want = {"allocated": stats["allocated_bytes.all.current"], "reserved": stats["reserved_bytes.all.current"],
            "inactive_split": stats["inactive_split_bytes.all.current"]}
    c.check("run: the exit snapshot's PyTorch cache equals memory_stats()", torch is not None and
            all(torch[k] == v for k, v in want.items()), memgap=torch, memory_stats=want)
    host = said["host"]
    pinned = [f["summary"] for f in exits[-1]["findings"] if f["code"] == "pinned-host-memory"] if exits else []
    c.check("run: its pinned pool as host_memory_stats() says, the finding confirmed from inside",
            torch is not None and torch.get("pinned_held") == host.get("allocated_bytes.current")
            and torch.get("pinned_active") == host.get("active_bytes.current") and pinned
            and pinned[0].startswith("pinned host memory:"), memgap=torch and {k: torch.get(k) for k in (
                "pinned_held", "pinned_active")}, host_memory_stats={k: host.get(k) for k in (
                    "allocated_bytes.current", "active_bytes.current")}, finding=pinned)
    from memgap.documents.records import RunDocument
    from memgap.lab.choose import choose, run_libraries

    libraries = run_libraries(RunDocument.from_dict(run))
    chosen = {ch.spec: ch.reason for ch in choose([], set(), True, libraries=libraries)}
    c.check("lab: the default set adds expandable segments for this process", EXPANDABLE in chosen,
            libraries=sorted(libraries), chosen=chosen)


def check_fragmenting(c, out_dir):
    for name, conf in (("default", None), ("expandable", "expandable_segments:True")):
        env = {**os.environ, "FRAG_REST": "0"}
        if conf:
            env["PYTORCH_ALLOC_CONF"] = conf
        began = time.perf_counter()
        done, run = run_json(out_dir, f"fragment_{name}", FRAGMENT, env=env)
        step = re.search(r"step_ms ([0-9.]+)", done.stdout)
        exits = [s for p in run["processes"] for s in p["snapshots"] if s.get("phase") == "exit" and s.get("gpu")]
        torch = (exits[-1]["gpu"] or {}).get("torch") if exits else None
        codes = [f["code"] for f in exits[-1]["findings"]] if exits else []
        c.check(f"fragmenting loop, {name}: the cache read at exit", torch is not None, torch=torch, findings=codes,
                step_ms=step and float(step[1]), wall=round(time.perf_counter() - began, 2))


def check_loader(c, out_dir):
    """Issue 31 on PyTorch's own DataLoader (tests/programs/torch_loader.py: 4 persistent forked workers reading
    a Dataset of 1,000,000 dicts for 2 epochs), under `memgap run` with no option: each worker recorded with its
    parent and what it copied from it (at least 80% of its private memory at rest), and the output says the
    copies are the parent's Python objects read by the workers."""
    done, run = run_json(out_dir, "run_loader", LOADER[0], *LOADER[1:])
    workers = {int(m[1]) for m in re.finditer(r"^read ([0-9]+)$", done.stdout, re.M)}  # the workers say so
    by_pid = {p["pid"]: p for p in run["processes"]}
    copied = {}
    for pid in workers:
        rest = [x for x in (by_pid.get(pid) or {}).get("copies") or [] if x.get("phase") == "quiet"]
        split = rest[-1]["split"] if rest else {}
        copied[pid] = {"ppid": (by_pid.get(pid) or {}).get("ppid"), "uss_mib": round(rest[-1]["uss"] / MiB, 1)
                       if rest else None, "copied_mib": round(split.get("copied", 0) / MiB, 1)}
    c.check("loader: 4 workers, each with its parent and its copies at rest", len(workers) == 4 and all(
        w["ppid"] and w["uss_mib"] and w["copied_mib"] >= 0.8 * w["uss_mib"] for w in copied.values()),
        workers=copied, exit_code=done.returncode, timeline=timeline_figures(run))
    said = " ".join(done.stdout.split())
    c.check("loader: the output names the copies and their cause", "of their parent's Python objects" in said
            and "by reading them" in said, finding=[f["summary"] for f in run.get("findings", [])
                                                    if f["code"] == "copied-from-parent"])


def _mib(spread):
    return round(spread[0] / MiB, 1) if spread else None


def check_lab(c, out_dir):
    """The lab over PYTORCH_ALLOC_CONF on the fragmenting loop: judged on the GPU's memory, each variant's
    figures written out (the verdict is measured, not expected: expandable segments may or may not win)."""
    path = os.path.join(out_dir, "lab_fragment.json")
    done = memgap("lab", "--variant", "glibc", "--variant", EXPANDABLE, "--reps", "3", "--timeout", "120",
                  "--metric", "steps_per_s", "--metric-regex", r"steps_per_s ([0-9.]+)", "--json", path,
                  "--markdown", os.path.join(out_dir, "lab_fragment.md"), "--", sys.executable, FRAGMENT,
                  name="lab_fragment", timeout=240)
    with open(path) as fh:
        lab = json.load(fh)
    variants = {v["spec"]: {"gpu_idle_mib": _mib(v.get("gpu_idle")), "gpu_peak_mib": _mib(v.get("gpu_peak")),
                            "idle_rss_mib": _mib(v.get("idle")), "steps_per_s": v.get("throughput"),
                            "step_ms": round(1000 / v["throughput"][0], 3) if v.get("throughput") else None,
                            "slowdown": v.get("slowdown"), "better": v.get("better"),
                            "within_budget": v.get("within_budget"), "reason": v.get("reason")}
                for v in lab["variants"]}
    c.check("lab: judged by the tree's GPU memory at idle", lab.get("objective") == "gpu", exit_code=done.returncode,
            objective=lab.get("objective"), why=lab.get("objective_why"), verdict=lab.get("verdict"),
            recommended=(lab.get("recommendation") or {}).get("variant"), variants=variants)
    c.check("lab: every variant's runs recorded device memory", all(v["gpu_idle_mib"] for v in variants.values())
            and all(r.get("gpu_idle") for r in lab["runs"] if r["status"] == "ok"),
            runs=[(r["variant"], r["status"], r.get("gpu_idle"), r.get("gpu_peak")) for r in lab["runs"]])


def check_cores(c, out_dir):
    """What many cores change (not issue 33's): glibc's arenas and the lab's ranking on the 32-thread decode pool
    (seed 000), four variants, 2 interleaved repetitions each; compared by hand with the same lab on 2 cores."""
    path = os.path.join(out_dir, "lab_cores.json")
    done = memgap("lab", "--variant", "glibc", "--variant", "glibc:arena_max=2", "--variant",
                  "glibc:mmap_threshold=131072", "--variant", "glibc:arena_max=2,trim=idle", "--reps", "2",
                  "--json", path, "--", sys.executable, "-m", "memgap.scenarios.threadpool", "--threads", "32",
                  "--chunks", "256", "--passes", "5", name="lab_cores", timeout=200)
    with open(path) as fh:
        lab = json.load(fh)
    variants = {v["spec"]: {"idle_mib": _mib(v.get("idle")), "mean_mib": _mib(v.get("mean")),
                            "peak_mib": _mib(v.get("peak")), "slowdown": v.get("slowdown"),
                            "better": v.get("better"), "within_budget": v.get("within_budget")}
                for v in lab["variants"]}
    c.check("cores: the lab ran on the 32-thread pool", done.returncode == 0, cpus=os.cpu_count(),
            verdict=lab.get("verdict"), recommended=(lab.get("recommendation") or {}).get("variant"),
            variants=variants, stdout_tail=done.stdout[-2500:])


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gpu_check-")
    os.makedirs(out_dir, exist_ok=True)
    OUT["dir"] = out_dir
    c = Checks()
    seconds = {}
    steps = {"holder": check_holder, "run": lambda c: check_run(c, out_dir),
             "fragmenting": lambda c: check_fragmenting(c, out_dir), "lab": lambda c: check_lab(c, out_dir),
             "loader": lambda c: check_loader(c, out_dir), "cores": lambda c: check_cores(c, out_dir)}
    wanted = [w for w in os.environ.get("GPU_STEPS", "").split(",") if w]  # a rerun of some steps only
    steps = {k: v for k, v in steps.items() if not wanted or k in wanted}
    for name, step in steps.items():
        began = time.perf_counter()
        print(f"--- {name}", flush=True)
        try:
            step(c)
        except Exception as exc:  # noqa: BLE001 - one step's failure is reported, the next still runs
            c.check(f"{name}: step raised {type(exc).__name__}", False, error=str(exc)[-500:])
        seconds[name] = round(time.perf_counter() - began, 1)
        print(f"--- {name}: {seconds[name]} s", flush=True)
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as fh:
        json.dump({"failed": c.failed, "checks": c.figures, "seconds": seconds}, fh, indent=1, default=str)
    print(f"{len(c.figures) - len(c.failed)} of {len(c.figures)} checks held; figures in {out_dir}/gpu_check.json")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
