"""`memgap serve-metrics` on real processes: a target program (programs/metrics_targets.py),
the server as a subprocess on a free port, /metrics scraped over loopback and parsed here.

Figures are checked against what the targets say of themselves (VmRSS read by the test at
scrape time, the bytes freed, the VmRSS drop of a real malloc_trim in the target), not
against memgap's own identities. Its bad arguments, its label escaping and the docs' metric names,
where nothing is started: tests/unit/test_serve_metrics_in_process.py.
"""
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from conftest import HERE, child_env
from helpers import MiB, memgap, parse_exposition as parse, vmrss

KiB = 1 << 10
TARGETS_PY = os.path.join(HERE, "programs", "metrics_targets.py")
LAYERS = {"files", "shared_memory", "python_objects", "pymalloc_free", "allocator_in_use", "allocator_free", "stacks",
          "static_data", "other_anon"}
PROCESS_LABELS = {"role", "index", "allocator"}


def samples(families, name):
    return families.get(name, {"samples": []})["samples"]


def by_role(families, name):
    """{(role, index): value} of a per-process metric."""
    out = {}
    for labels, value in samples(families, name):
        key = (labels["role"], int(labels["index"]))
        assert key not in out, f"{name}: two series for {key}"
        out[key] = value
    return out


# --- the processes -------------------------------------------------------------------------------

def read_line(proc, timeout=30.0):
    """A line of the process's stdout within ``timeout`` (its stderr in the failure if it ends)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    assert line, (f"no line from {proc.args} (exit {proc.poll()}): "
                  f"{proc.stderr.read() if proc.poll() is not None else ''}")
    return line


def start(*args):
    """In a session of its own: stop() ends the whole group, forked workers included."""
    return subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), start_new_session=True)


def target(mode):
    mark = f"metrics-{uuid.uuid4().hex[:12]}"
    return start(TARGETS_PY, mode, mark), mark


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()


class Server:
    """`memgap serve-metrics --port 0` on loopback; the address it prints is scraped."""

    def __init__(self, *args):
        self.proc = start("-m", "memgap", "serve-metrics", "--port", "0", "--address", "127.0.0.1", *args)
        line = read_line(self.proc)
        m = re.match(r"memgap: serving (http://127\.0\.0\.1:\d+/metrics) ", line)
        assert m, line
        self.url = m.group(1)

    def scrape(self):
        """(families, seconds the request took), after checking the response's status and type."""
        began = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=60) as resp:
            body = resp.read().decode()
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        took = time.perf_counter() - began
        families = parse(body)
        for name, fam in families.items():
            for labels, _ in fam["samples"]:
                assert "pid" not in labels, (name, labels)
        # prometheus_client's own parser reads the same samples (the format, as Prometheus reads it)
        from prometheus_client.parser import text_string_to_metric_families

        theirs = sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                        for fam in text_string_to_metric_families(body) for s in fam.samples)
        ours = sorted((name, tuple(sorted(labels.items())), value)
                      for name, fam in families.items() for labels, value in fam["samples"])
        assert theirs == ours
        return families, took

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        stop(self.proc)


@pytest.fixture
def servers():
    made = []

    def serve(*args):
        made.append(Server(*args))
        return made[-1]

    yield serve
    for s in made:
        s.close()


def near(value, expected, share=0.03, floor=256 * KiB):
    return abs(value - expected) <= max(share * expected, floor)


def check_scrape_cost(families, took):
    (labels, seconds), = samples(families, "memgap_scrape_duration_seconds")
    assert labels == {} and 0 < seconds <= took, (seconds, took)
    assert families["memgap_scrape_errors_total"]["type"] == "counter"
    assert samples(families, "memgap_scrape_errors_total") == [({}, 0.0)]


# --- tests ---------------------------------------------------------------------------------------

def test_one_process_its_rss_and_what_a_trim_would_release(servers):
    proc, _ = target("glibc")
    try:
        said = json.loads(read_line(proc))
        pid, freed = said["pid"], said["freed"]
        server = servers("--refresh", "0", str(pid))  # read at every scrape: figures of the moment
        families, took = server.scrape()
        rss_now = vmrss(pid)
        (key, rss), = by_role(families, "memgap_rss_bytes").items()
        assert key == ("metrics_targets.py", 0)
        assert near(rss, rss_now), (rss, rss_now)
        (labels, _), = samples(families, "memgap_rss_bytes")
        assert set(labels) == PROCESS_LABELS and labels["allocator"] == "glibc"
        layers = {lab["layer"]: v for lab, v in samples(families, "memgap_memory_bytes")}
        assert set(layers) <= LAYERS and {"files", "shared_memory", "allocator_in_use", "allocator_free"} <= set(layers)
        # the layer gauges and the unexplained one add up to the RSS gauge of the same scrape (as the docs say)
        (unexplained,) = by_role(families, "memgap_unexplained_bytes").values()
        assert abs(sum(layers.values()) + unexplained - rss) <= 0.01 * rss
        assert {lab["layer"] for lab, _ in samples(families, "memgap_layer_pss_bytes")} == set(layers)
        for name in ("memgap_pss_bytes", "memgap_uss_bytes"):
            (value,) = by_role(families, name).values()
            assert 0 < value <= rss, (name, value, rss)
        # the 20 MiB it freed, in whole pages (a 64 KiB block's chunk header takes part of one
        # page), plus whatever free space Python's own heap holds
        (releasable,) = by_role(families, "memgap_allocator_free_releasable_bytes").values()
        assert 0.9 * freed <= releasable <= freed + 4 * MiB, (releasable, freed)
        # the thread's arena keeps its 8 MiB top chunk free: in the layer, not releasable
        assert layers["allocator_free"] >= releasable + 0.9 * said["thread_top"], (layers, releasable)
        assert by_role(families, "memgap_glibc_arenas") == {key: 2.0}  # the main arena and the thread's
        # free bytes beside live chunks: the rest of the layer beside its whole free pages (no more than
        # Python's own heap holds free in pieces: a few MiB)
        (fragmented,) = by_role(families, "memgap_allocator_free_fragmented_bytes").values()
        assert 0 <= fragmented <= min(layers["allocator_free"] - releasable, 8 * MiB), (fragmented, layers)
        (cg_labels, usage), = samples(families, "memgap_cgroup_usage_bytes")
        assert set(cg_labels) == {"cgroup"} and usage >= by_role(families, "memgap_uss_bytes")[key]
        (_, working_set), = samples(families, "memgap_cgroup_working_set_bytes")
        assert working_set <= usage
        check_scrape_cost(families, took)

        # the figure against a real trim in the target: VmRSS falls by what it said
        proc.stdin.write("trim\n")
        proc.stdin.flush()
        trimmed = json.loads(read_line(proc))
        drop = trimmed["before"] - trimmed["after"]
        assert abs(drop - releasable) <= 0.05 * releasable + MiB, (drop, releasable)
        families, took = server.scrape()
        assert by_role(families, "memgap_allocator_free_releasable_bytes")[key] < MiB
        assert near(by_role(families, "memgap_rss_bytes")[key], vmrss(pid))
        check_scrape_cost(families, took)
    finally:
        stop(proc)


def test_a_tree_by_role_and_index_and_a_replaced_worker(servers):
    proc, _ = target("tree")
    try:
        master = proc.pid
        old, second = map(int, read_line(proc).split()[1:])
        server = servers("--refresh", "0", "--tree", str(master))
        families, took = server.scrape()
        rss = by_role(families, "memgap_rss_bytes")
        expected = {("master", 0): master, ("worker", 0): old, ("worker", 1): second}
        assert set(rss) == set(expected), rss
        # each series is its process: the workers hold 16 and 24 MiB of their own, 8 MiB apart
        for key, pid in expected.items():
            assert near(rss[key], vmrss(pid)), (key, rss[key], vmrss(pid))
        assert set(by_role(families, "memgap_pss_bytes")) == set(expected)
        assert len(samples(families, "memgap_cgroup_usage_bytes")) == 1  # one cgroup, said once
        assert samples(families, "memgap_processes") == [({}, 3.0)]
        check_scrape_cost(families, took)

        proc.stdin.write("replace\n")
        proc.stdin.flush()
        first, new = map(int, read_line(proc).split()[1:])
        assert first == second and not os.path.exists(f"/proc/{old}")
        families, took = server.scrape()
        rss = by_role(families, "memgap_rss_bytes")
        expected = {("master", 0): master, ("worker", 0): second, ("worker", 1): new}
        assert set(rss) == set(expected), rss
        for key, pid in expected.items():
            assert near(rss[key], vmrss(pid)), (key, rss[key], vmrss(pid))
        assert rss[("worker", 1)] - rss[("worker", 0)] > 6 * MiB  # the new one holds 32 MiB against 24
        check_scrape_cost(families, took)
    finally:
        stop(proc)


def test_a_match_that_exits_leaves_no_series_and_a_new_one_appears(servers):
    mark = f"metrics-{uuid.uuid4().hex[:12]}"
    first = start(TARGETS_PY, "sleep", mark)
    later = None
    try:
        read_line(first)
        server = servers("--refresh", "0", "--match", mark)
        families, _ = server.scrape()
        rss = by_role(families, "memgap_rss_bytes")
        assert list(rss) == [("metrics_targets.py", 0)] and near(rss[("metrics_targets.py", 0)], vmrss(first.pid))
        stop(first)
        families, took = server.scrape()  # 200, and the series gone: no error for Prometheus
        assert not samples(families, "memgap_rss_bytes") and not samples(families, "memgap_memory_bytes")
        assert samples(families, "memgap_processes") == [({}, 0.0)]
        check_scrape_cost(families, took)
        later = start(TARGETS_PY, "sleep", mark)
        read_line(later)
        families, _ = server.scrape()
        rss = by_role(families, "memgap_rss_bytes")
        assert list(rss) == [("metrics_targets.py", 0)] and near(rss[("metrics_targets.py", 0)], vmrss(later.pid))
    finally:
        stop(first)
        if later is not None:
            stop(later)


def per_process(families):
    """Every per-process and per-cgroup sample: what one collection holds."""
    return {name: fam["samples"] for name, fam in families.items()
            if not name.startswith(("memgap_scrape_", "memgap_collection", "memgap_processes"))}


def one(families, name):
    (labels, value), = samples(families, name)
    assert labels == {}, (name, labels)
    return value


def check_adds_up(families):
    (rss,) = by_role(families, "memgap_rss_bytes").values()
    (unexplained,) = by_role(families, "memgap_unexplained_bytes").values()
    layers = sum(v for _, v in samples(families, "memgap_memory_bytes"))
    assert abs(layers + unexplained - rss) <= 0.01 * rss, (layers, unexplained, rss)
    return rss


def test_a_collection_is_served_until_the_next_with_its_age_and_cost(servers):
    proc = start(TARGETS_PY, "grow", f"metrics-{uuid.uuid4().hex[:12]}")
    try:
        pid = int(read_line(proc).split()[1])
        server = servers("--refresh", "3600", str(pid))  # no collection in the test but the ones asked for
        first, _ = server.scrape()
        first_end = time.monotonic()
        rss = check_adds_up(first)
        assert near(rss, vmrss(pid)), (rss, vmrss(pid))
        number, age, cpu = (one(first, n) for n in ("memgap_collections_total", "memgap_collection_age_seconds",
                                                    "memgap_collection_seconds"))
        assert first["memgap_collections_total"]["type"] == "counter" and number >= 1 and age >= 0 and cpu > 0
        proc.stdin.write("grow\n")
        proc.stdin.flush()
        grown = json.loads(read_line(proc))
        assert grown["after"] - grown["before"] >= 30 * MiB, grown
        # before its refresh: the same collection, every figure as it was, only older
        stale_began = time.monotonic()
        stale, _ = server.scrape()
        assert per_process(stale) == per_process(first)
        assert one(stale, "memgap_collections_total") == number and one(stale, "memgap_collection_seconds") == cpu
        assert one(stale, "memgap_collection_age_seconds") - age >= stale_began - first_end
        # SIGUSR1 starts a collection: the next one shows the growth the target measured
        asked = time.monotonic()
        server.proc.send_signal(signal.SIGUSR1)
        while one(fresh := server.scrape()[0], "memgap_collections_total") == number:
            assert time.monotonic() - asked < 60, "no collection after SIGUSR1"
            time.sleep(0.05)
        answered = time.monotonic()
        assert one(fresh, "memgap_collections_total") == number + 1
        assert 0 <= one(fresh, "memgap_collection_age_seconds") <= answered - asked
        grew = check_adds_up(fresh) - rss
        assert near(grew, grown["after"] - grown["before"]) and near(check_adds_up(fresh), vmrss(pid))
    finally:
        stop(proc)


def one_line_error(proc, code, said):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("memgap: "), proc.stderr
    assert said in proc.stderr, proc.stderr


def test_no_process_and_a_port_in_use_are_one_line_errors():
    gone = subprocess.Popen(["true"])
    gone.wait()
    one_line_error(memgap("serve-metrics", "--port", "0", str(gone.pid)), 3, f"no process with PID {gone.pid}")
    mark = f"nothing-{uuid.uuid4().hex}"
    one_line_error(memgap("serve-metrics", "--port", "0", "--match", mark), 3, "no process matches")
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        one_line_error(memgap("serve-metrics", "--address", "127.0.0.1", "--port", str(port), str(os.getpid())),
                       1, f"cannot listen on 127.0.0.1:{port}")


# --- memgap.prometheus: the same families from inside a process, through prometheus_client ----

def test_the_collector_in_a_process_serves_the_same_families(tmp_path):
    proc, _ = target("collector")
    try:
        said = json.loads(read_line(proc))
        pid, freed = said["pid"], said["freed"]
        url = f"http://127.0.0.1:{said['port']}/metrics"
        began = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as resp:
            families = parse(resp.read().decode())
        took = time.perf_counter() - began
        rss_now = vmrss(pid)
        key = ("metrics_targets.py", 0)
        rss = by_role(families, "memgap_rss_bytes")
        assert list(rss) == [key] and near(rss[key], rss_now), (rss, rss_now)
        # prometheus_client's own process collector, read from /proc/self/stat in the same request
        (_, client_rss), = samples(families, "process_resident_memory_bytes")
        assert near(rss[key], client_rss), (rss, client_rss)
        layers = {lab["layer"]: v for lab, v in samples(families, "memgap_memory_bytes")}
        assert set(layers) == LAYERS, layers  # in-process: every layer, Python's objects whole
        assert not samples(families, "memgap_layer_pss_bytes")  # in-process: no PSS per layer (said in docs)
        (releasable,) = by_role(families, "memgap_allocator_free_releasable_bytes").values()
        assert 0.9 * freed <= releasable <= freed + 4 * MiB, (releasable, freed)
        assert layers["allocator_free"] >= releasable + 0.9 * said["thread_top"]
        check_scrape_cost(families, took)
        proc.stdin.write("trim\n")
        proc.stdin.flush()
        trimmed = json.loads(read_line(proc))
        drop = trimmed["before"] - trimmed["after"]
        assert abs(drop - releasable) <= 0.05 * releasable + MiB, (drop, releasable)
    finally:
        stop(proc)


def test_the_collector_without_prometheus_client_says_how_to_get_it():
    code = ("import sys; import memgap; assert 'prometheus_client' not in sys.modules\n"
            "sys.modules['prometheus_client'] = None  # as if not installed\n"
            "try:\n    import memgap.prometheus\nexcept ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("memgap.prometheus needs prometheus_client, which is not installed: "
                                  "pip install prometheus-client (or memgap[prometheus])")


def test_a_trees_workers_copies_of_their_masters_objects(servers):
    """programs/fork_readers.py (no memgap in it): 4 `multiprocessing` workers that read their parent's
    dicts, then rest; each worker's copies, by where they fall, nearly all its private memory."""
    proc = start(os.path.join(HERE, "programs", "fork_readers.py"), "50000", "60")
    try:
        for _ in range(4):  # "read PID" as each worker's passes end: it rests from then on
            assert read_line(proc, timeout=120).startswith("read ")
        server = servers("--refresh", "0", "--tree", str(proc.pid))
        families, took = server.scrape()
        uss = by_role(families, "memgap_uss_bytes")
        copied = {}
        for labels, value in samples(families, "memgap_copied_from_parent_bytes"):
            key = (labels["role"], int(labels["index"]))
            copied.setdefault(key, {})[labels["group"]] = value
        assert set(copied) == {("worker", i) for i in range(4)}, copied  # the master copied from no one
        for key, groups in copied.items():
            assert groups["Python objects (pymalloc arenas)"] >= 0.8 * uss[key], (key, groups, uss[key])
        check_scrape_cost(families, took)
    finally:
        stop(proc)
