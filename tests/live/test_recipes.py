"""The recipes of docs/recipes.md, each measured on a real program: the page's gunicorn
config (a trim after a request) against the same server without it; the multiprocessing lines
(a pool with the spawn start method: the child's environ and its trimmer's trim); its Celery
lines and MEMGAP_TRIMMER=1 on real prefork workers, against one with neither; and the
Dockerfile and Kubernetes lines, rendered from the lab's remedy lines, given to a process as
a container runtime would (its environ, its arena count read by memgap from outside, against
the same program started without them)."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil

from conftest import HERE, child_env
from helpers import MiB, http, start_gunicorn, vmrss
from memgap.allocators.variants import parse_variant
from memgap.explain.snapshot import snapshot_pid
from memgap.lab.remedy_lines import recommendation_lines
from memgap.record.recorder import BOOTSTRAP_DIR
from memgap.report.remedy import remedy_forms
from memgap.sources.procfs import ProcReader

PAGE = os.path.join(HERE, "..", "docs", "recipes.md")
PROGRAMS = os.path.join(HERE, "programs")
BURSTS = 4
VARIANT = "glibc:arena_max=2,trim=quiet"  # the lab's variant whose lines the container recipe renders


def page():
    with open(PAGE) as f:
        return f.read()


def block(first_line):
    """The page's fenced code block whose first line is ``first_line``."""
    found = re.search(r"```[a-z]*\n(" + re.escape(first_line) + r"\n.*?)```", page(), re.S)
    assert found, f"no block starting {first_line!r} in docs/recipes.md"
    return found.group(1)


def installed_env(**extra):
    """The environment of a program where memgap is installed: its bootstrap on PYTHONPATH stands
    in for the memgap-activate.pth a pip install puts in site-packages (test_remedy_ships.py runs
    that wheel)."""
    env = child_env(**extra)
    env["PYTHONPATH"] = BOOTSTRAP_DIR + os.pathsep + env["PYTHONPATH"]
    return env


def gunicorn(*args):
    return start_gunicorn("web_apps:_plain_wsgi", 2, *args)


def workers_rss(proc):
    return sum(vmrss(c.pid) for c in psutil.Process(proc.pid).children())


def test_a_trim_after_requests_instead_of_max_requests(tmp_path):
    config = tmp_path / "gunicorn.conf.py"
    config.write_text(block("# gunicorn.conf.py: a trim after a request that left memory free"))
    servers = []
    try:
        servers.append(gunicorn())
        servers.append(gunicorn("--config", str(config)))
        (plain, plain_url), (hooked, hooked_url) = servers
        for _ in range(BURSTS):  # the same requests to both: each a burst, one in eight blocks kept
            for url in (plain_url, hooked_url):
                status, _, body = http(url + "/burst")
                assert status == 200, body
        # the hook runs after the response is sent: the workers are read until they are below
        # 0.7 of the plain server's (read each time too), or the deadline says they did not get there
        deadline = time.monotonic() + 10
        while True:
            without, with_hook = workers_rss(plain), workers_rss(hooked)
            if with_hook < 0.7 * without or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        print(f"after {BURSTS} bursts per server: workers' VmRSS {without / MiB:.0f} MiB without the hook, "
              f"{with_hook / MiB:.0f} MiB with it ({with_hook / without:.2f}x)")
        assert with_hook < 0.7 * without, (with_hook, without)
    finally:
        for proc, _ in servers:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stderr.close()


def test_multiprocessing_children_started_by_spawn_trim():
    with open(os.path.join(PROGRAMS, "spawn_pool.py")) as f:
        program = f.read()
    recipe = program.split("# recipe: start\n")[1].split("    # recipe: end")[0]
    assert recipe.replace("\n    ", "\n").strip() in page()  # the page's lines are the ones that run
    proc = subprocess.Popen([sys.executable, os.path.join(PROGRAMS, "spawn_pool.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=installed_env(), start_new_session=True)
    try:
        child = int(proc.stdout.readline())
        after_burst = vmrss(child)
        assert ProcReader(child).environ().get("MEMGAP_TRIMMER") == "1"
        assert "MEMGAP_TRIMMER" not in ProcReader(proc.pid).environ()  # set by the recipe, not by the test
        # the child's trimmer trims once it has been quiet for 2 s: its VmRSS, read here, drops
        now = _vmrss_once_trimmed(child, after_burst)
        print(f"spawned child: VmRSS {after_burst / MiB:.0f} MiB after its burst, {now / MiB:.0f} MiB after its "
              "trimmer's trim")
        assert after_burst - now >= 40 * MiB, (after_burst, now)
    finally:
        _stop(proc)


def _stop(proc):
    """A program started with its stdin and stdout piped, in its own session: killed, with its group."""
    proc.stdin.close()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def _vmrss_once_trimmed(child, after_burst):
    """The child's VmRSS, read here, once it fell 40 MiB below ``after_burst`` (its trimmer trims
    after 2 s of quiet), or after 15 s."""
    deadline, now = time.monotonic() + 15, after_burst
    while after_burst - now < 40 * MiB and time.monotonic() < deadline:
        time.sleep(0.2)
        now = vmrss(child)
    return now


def test_a_forked_worker_starts_its_own_trimmer():
    """MEMGAP_TRIMMER=1 reaches a worker forked after start-up (gunicorn, Celery prefork, a fork
    Pool): a thread does not survive fork(), so the bootstrap starts a trimmer in each child.
    The worker's own threads (the kernel's count) and its VmRSS after a burst, read here."""
    proc = subprocess.Popen([sys.executable, os.path.join(PROGRAMS, "fork_worker.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=installed_env(MEMGAP_TRIMMER="1"),
                            start_new_session=True)
    try:
        child = int(proc.stdout.readline())
        threads = int(ProcReader(child).status()["Threads"])
        after_burst = vmrss(child)
        now = _vmrss_once_trimmed(child, after_burst)
        assert threads == 2, threads  # its main thread and the trimmer
        assert after_burst - now >= 40 * MiB, (after_burst, now)
    finally:
        _stop(proc)


def kubernetes_env(manifest):
    """The name and value pairs of a container's env: list (values as YAML's double-quoted scalars)."""
    return {k: json.loads(v) for k, v in re.findall(r"- name: (\S+)\n\s+value: (\".*\")", manifest)}


def arenas(env):
    """A program with 8 threads, each holding a few allocations of its own, started with ``env``:
    its environ as the kernel keeps it, and its glibc arena count read by memgap from outside."""
    threads = ("import sys, threading\n"
               "ready, done = threading.Barrier(9), threading.Barrier(9)\n"
               "def work():\n    keep = [bytes(50_000) for _ in range(4)]\n    ready.wait(); done.wait()\n"
               "for _ in range(8): threading.Thread(target=work).start()\n"
               "ready.wait(); print('ready', flush=True); sys.stdin.readline(); done.wait()\n")
    proc = subprocess.Popen([sys.executable, "-c", threads], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline() == "ready\n"
        snap = snapshot_pid(proc.pid)
        return ProcReader(proc.pid).environ(), snap.layers["allocator_free"].detail["arena_count"]
    finally:
        proc.communicate("\n", timeout=30)


def test_container_env_reaches_the_process_and_its_allocator():
    lines = remedy_forms(recommendation_lines(parse_variant(VARIANT)))
    text = page()
    # the page's Dockerfile and Kubernetes lines are the lab's own, rendered from its data
    assert f"```dockerfile\n{lines['dockerfile']}\n```" in text
    assert f"```yaml\n{lines['kubernetes']}\n```" in text
    manifest = kubernetes_env(lines["kubernetes"])
    assert manifest == {"MALLOC_ARENA_MAX": "2", "MEMGAP_TRIMMER": "1"}
    # started with the manifest's env, as the container runtime starts the image's command
    environ, count = arenas(installed_env(**manifest))
    assert {k: environ.get(k) for k in manifest} == manifest
    assert count <= 2, count
    # the control: the same program without them has an arena per thread
    plain = {k: v for k, v in child_env().items() if k not in manifest}
    _, control = arenas(plain)
    print(f"arenas: {count} with the manifest's env, {control} without")
    assert control > 2, control


def celery_app():
    """programs/celery_app.py, imported here to send its task."""
    spec = importlib.util.spec_from_file_location("celery_app", os.path.join(PROGRAMS, "celery_app.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def celery_worker(tmp_path, name, module, **env):
    """``celery -A module worker`` with a prefork pool of one process, its broker kombu's
    filesystem transport in a folder of its own; the burst task sent to it at once (the message
    waits in the folder while the worker starts). The worker and the file its task's PID goes to."""
    folder = tmp_path / name
    folder.mkdir()
    env = installed_env(MEMGAP_CELERY_DIR=str(folder), **env)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), PROGRAMS, env["PYTHONPATH"]])
    with open(tmp_path / f"{name}.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", module, "worker", "--pool", "prefork",
                                 "--concurrency", "1", "--without-heartbeat", "--without-mingle", "--without-gossip",
                                 "-l", "warning"], cwd=tmp_path, env=env, stdout=log, stderr=log,
                                start_new_session=True)
    pid_file = tmp_path / f"{name}.pid"
    celery_app().make_app(str(folder)).send_task("celery_app.burst", args=[str(pid_file)])
    return proc, pid_file


def test_a_celery_prefork_pool_process_trims(tmp_path):
    """The page's Celery lines (its worker_process_init hook, in the app's module) and its
    MEMGAP_TRIMMER=1 in the worker's environment, each on a real `celery worker` whose prefork
    pool process (forked by billiard) runs a task that makes a burst; a third worker with neither
    is the control. Each pool process's threads (the kernel's count) and VmRSS, read here."""
    assert "`MEMGAP_TRIMMER=1 celery -A proj worker`" in page()  # the page's form with the environment
    (tmp_path / "recipe_app.py").write_text("from celery_app import app  # noqa: F401\n\n"
                                            + block("from celery.signals import worker_process_init"))
    workers = {}
    try:
        workers["hook"] = celery_worker(tmp_path, "hook", "recipe_app")
        workers["env"] = celery_worker(tmp_path, "env", "celery_app", MEMGAP_TRIMMER="1")
        workers["none"] = celery_worker(tmp_path, "none", "celery_app")
        deadline, pids = time.monotonic() + 15, {}
        while len(pids) < len(workers) and time.monotonic() < deadline:
            time.sleep(0.05)
            pids.update((k, int(f.read_text())) for k, (_, f) in workers.items() if f.exists())
        assert len(pids) == len(workers), {k: (tmp_path / f"{k}.log").read_text() for k in workers if k not in pids}
        after_burst, read_at = {k: vmrss(pid) for k, pid in pids.items()}, time.monotonic()
        threads = {k: int(ProcReader(pid).status()["Threads"]) for k, pid in pids.items()}
        # each trimmer trims once its pool process has been quiet for 2 s: VmRSS, read here, drops
        now = dict(after_burst)
        while (min(after_burst[k] - now[k] for k in ("hook", "env")) < 40 * MiB
               and time.monotonic() < deadline):
            time.sleep(0.2)
            now = {k: vmrss(pid) for k, pid in pids.items()}
        print("celery pool processes: " + ", ".join(
            f"{k}: {threads[k]} threads, VmRSS {after_burst[k] / MiB:.0f} MiB after the burst, {now[k] / MiB:.0f} MiB "
            f"{time.monotonic() - read_at:.1f} s later" for k in pids))
        assert threads == {"hook": 2, "env": 2, "none": 1}, threads  # the trimmer's thread, or none
        for k in ("hook", "env"):
            assert after_burst[k] - now[k] >= 40 * MiB, (k, after_burst[k], now[k])
        assert after_burst["none"] - now["none"] < 8 * MiB, (after_burst["none"], now["none"])  # no trimmer
    finally:
        for proc, _ in workers.values():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
