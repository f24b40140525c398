"""Issue 33's check on a machine with an NVIDIA GPU, PyTorch and nvidia-smi (the GPU lane: not run by
scripts/test.sh). Run it through scripts/gpu_check.sh, which puts src/ on the path:

    sh scripts/gpu_check.sh [OUT_DIR]

1. A PyTorch process as in tests/fixtures/torch-2.11-cuda13/cuda (a 4 GiB GPU tensor, a matmul, 1 GiB of pinned
   host memory), which does not import memgap: `inspect --json` names its pinned memory and the driver's mappings
   (against its smaps), its layers add up, and its device memory is within 1% of nvidia-smi's per-process figure;
   `top --iterations 1` prints the same figure.
2. The same program under `memgap run`: its timeline's samples carry its device memory (within 1% of the
   nvidia-smi figure the program read of itself just before it exits), and its in-process exit snapshot's PyTorch
   cache equals the torch.cuda.memory_stats() the program printed at that moment.
3. A fragmenting loop (200 tensors of 12-84 MiB, one in three kept) under `memgap run`, by default and with
   PYTORCH_ALLOC_CONF=expandable_segments:True: reserved, allocated, split blocks and the loop's step time
   beside each (the lab has no variant for an environment variable of this kind yet, so two runs side by side).

Every figure goes to OUT_DIR/gpu_check.json; the script exits 1 where a check failed, and says which.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
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
    print("FIGURES " + json.dumps({"smi_mib": used[0] if used else None, "stats": torch.cuda.memory_stats()}),
          flush=True)
else:
    sys.stdin.readline()
"""
FRAGMENT = r"""
import time, torch
torch.ones(1, device="cuda")
kept, began = [], time.perf_counter()
for i in range(200):
    t = torch.empty((12 + (i * 37) % 73) << 20, dtype=torch.uint8, device="cuda")
    if i % 3 == 0:
        kept.append(t)
    del t
torch.cuda.synchronize()
print("STEP %.4f" % ((time.perf_counter() - began) / 200), flush=True)
"""


def memgap(*args, **kw):
    return subprocess.run([sys.executable, "-m", "memgap", *args], capture_output=True, text=True, timeout=300, **kw)


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
        out = memgap("inspect", str(pid), "--json", "-")
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
        top = memgap("top", str(pid), "--iterations", "1", "--interval", "1")
        shown = re.search(r"GPU 0 [^:]*: ([0-9.]+) MiB", top.stdout)
        c.check("top: device memory within 1% of nvidia-smi", shown and within(float(shown[1]), smi),
                top_mib=shown and float(shown[1]), nvidia_smi_mib=smi, stderr=top.stderr[-300:])
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def run_json(out_dir, name, program, *args, env=None):
    path = os.path.join(out_dir, f"{name}.json")
    done = memgap("run", "--json", path, "--", sys.executable, "-c", program, *args, env=env)
    with open(path) as fh:
        return done, json.load(fh)


def check_run(c, out_dir):
    done, run = run_json(out_dir, "run_holder", HOLDER, "exit")
    said = json.loads(done.stdout.split("FIGURES ", 1)[1].splitlines()[0])
    samples = [s["gpu"] for s in run["timeline"] if "gpu" in s]
    c.check("run: the timeline's last device memory within 1% of nvidia-smi's", samples and
            within(samples[-1], said["smi_mib"] * MiB), last=samples[-1] if samples else None,
            nvidia_smi_mib=said["smi_mib"], samples=len(samples))
    exits = [s for p in run["processes"] for s in p["snapshots"] if s.get("phase") == "exit" and s.get("gpu")]
    torch = (exits[-1]["gpu"] or {}).get("torch") if exits else None
    stats = said["stats"]
    want = {"allocated": stats["allocated_bytes.all.current"], "reserved": stats["reserved_bytes.all.current"],
            "inactive_split": stats["inactive_split_bytes.all.current"]}
    c.check("run: the exit snapshot's PyTorch cache equals memory_stats()", torch is not None and
            all(torch[k] == v for k, v in want.items()), memgap=torch, memory_stats=want)


def check_fragmenting(c, out_dir):
    for name, conf in (("default", None), ("expandable", "expandable_segments:True")):
        env = dict(os.environ)
        if conf:
            env["PYTORCH_ALLOC_CONF"] = conf
        began = time.perf_counter()
        done, run = run_json(out_dir, f"fragment_{name}", FRAGMENT, env=env)
        step = re.search(r"STEP ([0-9.]+)", done.stdout)
        exits = [s for p in run["processes"] for s in p["snapshots"] if s.get("phase") == "exit" and s.get("gpu")]
        torch = (exits[-1]["gpu"] or {}).get("torch") if exits else None
        codes = [f["code"] for f in exits[-1]["findings"]] if exits else []
        c.check(f"fragmenting loop, {name}: the cache read at exit", torch is not None, torch=torch, findings=codes,
                step_seconds=step and float(step[1]), wall=round(time.perf_counter() - began, 2))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gpu_check-")
    os.makedirs(out_dir, exist_ok=True)
    c = Checks()
    for step in (check_holder, lambda c: check_run(c, out_dir), lambda c: check_fragmenting(c, out_dir)):
        try:
            step(c)
        except Exception as exc:  # noqa: BLE001 - one step's failure is reported, the next still runs
            c.check(f"step raised {type(exc).__name__}", False, error=str(exc)[-500:])
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as fh:
        json.dump({"failed": c.failed, "checks": c.figures}, fh, indent=1, default=str)
    print(f"{len(c.figures) - len(c.failed)} of {len(c.figures)} checks held; figures in {out_dir}/gpu_check.json")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
