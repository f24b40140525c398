"""Running memgap and its scenarios as real child processes."""
import json
import os
import re
import signal
import subprocess
import sys

from conftest import child_env

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
MiB = 1 << 20


def memgap(*args, env=None, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "memgap", *args], env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout, **kw)


def run_recorded(tmp_path, cmd, **env_extra):
    """``memgap run --json`` a command; returns (completed process, run document)."""
    out = os.path.join(str(tmp_path), "run.json")
    proc = memgap("run", "--interval", "0.05", "--json", out, "--", *cmd, env=child_env(**env_extra))
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out) as fh:
        return proc, json.load(fh)


def phase_snapshot(process, name):
    matches = [s for s in process["snapshots"] if s["phase"] == name]
    assert matches, f"no {name!r} snapshot in {[s['phase'] for s in process['snapshots']]}"
    return matches[-1]


def check_adds_up(snap):
    """The layers leave little of VmRSS unexplained and agree with the kernel's own split
    (file-backed and shared memory against RssFile + RssShmem, the rest against RssAnon)."""
    layers = {k: v["resident"] for k, v in snap["layers"].items()}
    measured = {k: v for k, v in layers.items() if v is not None}
    rss = snap["rss"]
    assert all(v >= 0 for v in measured.values()), layers
    assert abs(snap["unexplained"]) <= 0.05 * rss, (snap["unexplained"], rss)
    status = snap["status"]
    # Independent of the pagemap walk: the kernel's counters, read in the same snapshot.
    mapped = layers["files"] + sum(layers.get(k) or 0 for k in ("shared_memory", "gpu_driver", "pinned_host"))
    assert abs(mapped - status["RssFile"] - status.get("RssShmem", 0)) <= 0.03 * rss + MiB
    anon = sum(v for k, v in measured.items() if k not in ("files", "shared_memory", "gpu_driver", "pinned_host"))
    assert abs(anon - status["RssAnon"]) <= 0.03 * rss + MiB
    if snap.get("pymalloc"):
        detail = snap["layers"]["pymalloc_free"]["detail"]
        # in-process, memgap's own reading allocates in the process it reads: pymalloc may map an
        # arena for it, or unmap one it emptied, between the statistics and the memory map
        # (11 of 12 once: an arena of the capture's short-lived objects)
        assert abs(detail["arenas_found"] - detail["arenas"]) <= 1, detail
    return layers


def recommended(lab):
    """The variant a lab document recommends, or None (so a failed check prints the verdict, not a TypeError)."""
    return (lab.get("recommendation") or {}).get("variant")


def memory_cgroup(name, limit):
    """A memory cgroup under this process's own, capped at ``limit`` bytes (v1 or v2), or None
    where this machine does not allow one (no permission, no memory controller)."""
    with open("/proc/self/cgroup") as fh:
        lines = [line.rstrip("\n").split(":", 2) for line in fh]
    v1 = next((path for _, ctrl, path in lines if "memory" in ctrl.split(",")), None)
    v2 = next((path for hid, ctrl, path in lines if hid == "0" and ctrl == ""), None)
    candidates = []
    if v1 is not None:
        candidates.append((f"/sys/fs/cgroup/memory{v1}", "memory.limit_in_bytes"))
    if v2 is not None:
        candidates.append((f"/sys/fs/cgroup{v2}", "memory.max"))
    for base, knob in candidates:
        path = os.path.join(base, name)
        try:
            os.mkdir(path)
        except OSError:
            continue
        try:
            with open(os.path.join(path, knob), "w") as fh:
                fh.write(str(limit))
            return path
        except OSError:
            os.rmdir(path)
    return None


def pss_sum(pids):
    """The kernel's Pss summed over the processes (smaps_rollup, read here): a tree's witness."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            total += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
    return total


def vmrss(pid):
    """VmRSS of ``pid`` in bytes, read by the test from /proc (a witness beside memgap's figures)."""
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


class OwnFigures:
    """A C test program that prints its allocator's own figures ("name=value ..."), then
    "ready", and prints them again for each line it reads (programs/je_stats.c, own_stats.c)."""

    def __init__(self, exe, *args, **env):
        self.proc = subprocess.Popen([exe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env})
        self.first = self._figures(self.proc.stdout.readline())
        assert self.proc.stdout.readline() == "ready\n"

    @staticmethod
    def _figures(line):
        return {k: int(v) for k, v in (word.split("=") for word in line.split())}

    def figures(self):
        assert self.proc.poll() is None, "the program died"
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self._figures(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def http(url, headers=None, data=None, method=None, timeout=30):
    """(status, headers, body) of one request over loopback; an HTTP error status is returned, not raised."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read()


def html_figures(page):
    """{layer: bytes} from the data-bytes attributes of a snapshot's HTML table rows
    (memgap.report.snapshot_html), and the JSON document the page embeds (None where none)."""
    import re

    rows = {name: int(value) for name, value in
            re.findall(r'<tr data-layer="([a-z_]+)" data-bytes="(-?\d+)"', page)}
    embedded = re.search(r'<script type="application/json" id="memgap-snapshot">(.*?)</script>', page, re.S)
    return rows, json.loads(embedded.group(1)) if embedded else None


def self_contained(page):
    """Nothing in the page loads from elsewhere: no src or href, no stylesheet link, no import."""
    import re

    assert not re.search(r"\b(src|href)\s*=", page), re.search(r".{40}\b(src|href)\s*=.{60}", page).group(0)
    assert "<link" not in page and "@import" not in page and "<script src" not in page


def start_gunicorn(app, workers, *args, env=None):
    """(process, URL) of gunicorn from the package index serving ``app`` of tests/programs on a
    free port, ``--preload``, once all ``workers`` have booted (read from its log); killed, with
    its log in the failure, where it does not get there. The caller kills its process group."""
    import pytest

    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--chdir", os.path.join(os.path.dirname(__file__),
                             "programs"), "--bind", "127.0.0.1:0", "--workers", str(workers), "--preload",
                             "--no-control-socket", *args, app],
                            stderr=subprocess.PIPE, text=True, env=env or child_env(), start_new_session=True)
    url, booted, seen = None, 0, []
    for line in proc.stderr:
        seen.append(line)
        m = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", line)
        url = m.group(1) if m else url
        booted += "Booting worker with pid" in line
        if booted == workers and url:
            return proc, url
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    pytest.fail(f"gunicorn did not start: {''.join(seen)}")


def build_c(tmp_path_factory, name, *flags):
    """tests/programs/NAME.c built with gcc into a folder of its own: the path of the program (a test that
    needs one skips where there is no compiler, which --no-skips turns into a failure)."""
    import shutil

    import pytest

    from conftest import HERE

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip(f"no C compiler (gcc) to build programs/{name}.c")
    exe = tmp_path_factory.mktemp(name) / name
    subprocess.run([cc, "-O1", *flags, "-o", str(exe), os.path.join(HERE, "programs", f"{name}.c")], check=True)
    return str(exe)


def thread_states(pid):
    """Each thread's state letter from /proc/PID/task/*/stat ('t' or 'T': stopped)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                out.append(fh.read().rpartition(")")[2].split()[0])
        except OSError:  # a thread that ended meanwhile
            continue
    return out


# --- Prometheus' exposition format (serve-metrics' /metrics), parsed in the tests ----------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_exposition(text):
    """{name: {"help", "type", "samples": [(labels, value)]}} from exposition text 0.0.4, checking
    that HELP then TYPE come before a family's samples, and that its samples are together."""
    families, current = {}, None
    assert text.endswith("\n"), text[-200:]
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP "):].partition(" ")
            assert name not in families, f"{name} described twice"
            families[name] = {"help": help_text, "type": None, "samples": []}
            current = None
        elif line.startswith("# TYPE "):
            name, kind = line[len("# TYPE "):].split(" ")
            assert name in families and families[name]["type"] is None, f"TYPE {name} not right after its HELP"
            assert kind in ("gauge", "counter"), line
            families[name]["type"], current = kind, name
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, label_text, value = m.groups()
            assert name == current, f"{name} sample outside its family (HELP/TYPE first, samples together)"
            labels, pos = {}, 0
            for lm in LABEL.finditer(label_text or ""):
                assert lm.start() == pos, f"bad labels in {line!r}"
                key = lm.group(1)
                assert key not in labels, line
                labels[key] = re.sub(r'\\[\\"n]', lambda e: UNESCAPE[e.group(0)], lm.group(2))
                pos = lm.end() + 1  # past the comma
            assert pos >= len(label_text or ""), f"bad labels in {line!r}"
            families[name]["samples"].append((labels, float(value)))
    return families


# the findings' words and figures, as the tests of tests/unit and tests/live read them
FIGURES = re.compile(r"(-?\d+(?:\.\d+)?)")


def figures(text):
    """The numbers in a line of text, in order."""
    return [float(x) for x in FIGURES.findall(text)]


def the_finding(findings, code):
    """The one finding with this code (a Finding or its dict)."""
    found = [f for f in findings if (f["code"] if isinstance(f, dict) else f.code) == code]
    assert len(found) == 1, (code, findings)
    f = found[0]
    return f if isinstance(f, dict) else f.__dict__


def codes(findings):
    return {f["code"] if isinstance(f, dict) else f.code for f in findings}


# the runtimes' tests, their live and their captured halves
def jvm_fixture(name, mode="r"):
    """A file captured from a real JVM (fixtures/jvm/)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "jvm", name), mode) as fh:
        return fh.read()


def mxbean(text):
    """JvmHeap's line of figures (key=value, bytes) as a dict."""
    return {k: int(v) for k, v in (w.split("=") for w in text.split())}


def within(value, witness, share=0.05):
    return abs(value - witness) <= share * witness


def joined_heap_ranges(ranges):
    """A runtime's heap ranges, sorted, the adjacent ones joined: (start, end) each."""
    out = []
    for r in sorted((r for r in ranges if r.heap), key=lambda r: r.start):
        if out and out[-1][1] == r.start:
            out[-1] = (out[-1][0], r.end)
        else:
            out.append((r.start, r.end))
    return out


def private_dirty_in_inherited(pid, parent):
    """The witness: Private_Dirty of the worker's mappings that its parent maps at the same
    addresses, summed from smaps in the test (memgap reads pagemap's bits instead)."""
    with open(f"/proc/{parent}/maps") as fh:
        theirs = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in fh
                  if line.split()[1][1] == "w" and line.split()[1][3] == "p"]
    total, inherited = 0, False
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                inherited = fields[1][1] == "w" and fields[1][3] == "p" and any(a < hi and lo < b for a, b in theirs)
            elif fields[0] == "Private_Dirty:" and inherited:
                total += int(fields[1]) * 1024
    return total
