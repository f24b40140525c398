"""memgap.web.WSGIMiddleware in a real gunicorn, three sync workers, the app preloaded in the
master (programs/web_apps.py: a plain WSGI callable, a token, the idle trimmer): each answer
against the VmRSS of the worker that gave it, read here around the request; the HTML's
figures; the app's own paths untouched; the token; and a real trim in a worker after a
burst, seen in its VmRSS (test_web_asgi.py has the control: no trimmer, no drop)."""
import json
import os
import signal
import time

import psutil
import pytest

from conftest import child_env
from helpers import MiB, html_figures, http, self_contained, start_gunicorn, vmrss

TOKEN = "s3cret-wsgi"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WORKERS = 3
SLACK = 512 << 10


@pytest.fixture(scope="module")
def server():
    proc, url = start_gunicorn("web_apps:make_wsgi()", WORKERS, env=child_env(MEMGAP_TEST_TOKEN=TOKEN))
    try:
        yield proc, url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


def workers(master):
    return {c.pid for c in psutil.Process(master).children()}


def test_each_answer_is_the_worker_that_gave_it(server):
    master, url = server
    pids = workers(master.pid)
    assert len(pids) == WORKERS
    answered = set()
    for _ in range(6):
        before = {pid: vmrss(pid) for pid in pids}
        status, head, body = http(url + "/memgap", AUTH)
        assert status == 200 and head["Content-Type"] == "application/json", body
        doc = json.loads(body)
        pid = doc["pid"]
        after = vmrss(pid)
        assert pid in pids and head["X-Memgap-Pid"] == str(pid)
        assert min(before[pid], after) - SLACK <= doc["rss"] <= max(before[pid], after) + SLACK, \
            (doc["rss"], before[pid], after)
        assert sum(v["resident"] or 0 for v in doc["layers"].values()) + doc["unexplained"] == doc["rss"]
        assert set(doc["trimmer"]) == {"trims", "released", "seconds", "checks"}
        answered.add(pid)
    print(f"answered by {len(answered)} of {WORKERS} workers")


def test_the_html_page_holds_the_same_figures(server):
    master, url = server
    pids = workers(master.pid)
    before = {pid: vmrss(pid) for pid in pids}
    status, head, body = http(url + "/memgap?format=html", AUTH)
    assert status == 200 and head["Content-Type"] == "text/html; charset=utf-8"
    page = body.decode()
    self_contained(page)
    rows, doc = html_figures(page)
    pid = int(head["X-Memgap-Pid"])
    after = vmrss(pid)
    assert doc["pid"] == pid and f"PID {pid}" in page
    assert min(before[pid], after) - SLACK <= rows["rss"] <= max(before[pid], after) + SLACK
    assert rows["rss"] == doc["rss"] and sum(v for k, v in rows.items() if k != "rss") == rows["rss"]


def test_every_other_path_goes_to_the_app_untouched(server):
    _, url = server
    status, head, body = http(url + "/echo?format=html", {"Authorization": "Bearer the app's own"},
                              data=b"payload", method="POST")
    assert status == 200 and head["X-App"] == "plain-wsgi"
    echo = json.loads(body)
    assert (echo["method"], echo["path"], echo["query"], echo["body"]) == ("POST", "/echo", "format=html", "payload")
    assert echo["headers"]["authorization"] == "Bearer the app's own"
    for path in ("/", "/memgapx", "/memgap/more"):
        status, head, body = http(url + path)
        assert (status, head["X-App"], body) == (404, "plain-wsgi", b"the app's own 404\n"), path


def test_the_token(server):
    _, url = server
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"X-Token": TOKEN}):
        status, head, body = http(url + "/memgap", headers)
        assert status == 401 and head["WWW-Authenticate"].startswith("Bearer") and b"Bearer TOKEN" in body
        assert TOKEN.encode() not in body
    status, _, _ = http(url + "/memgap", {"Authorization": f"bearer {TOKEN}"})  # the scheme is case-blind
    assert status == 200


def test_the_trimmer_trims_a_worker_after_a_burst(server):
    master, url = server
    pids = workers(master.pid)
    before = {pid: vmrss(pid) for pid in pids}
    status, _, body = http(url + "/burst")
    assert status == 200
    pid = json.loads(body)["pid"]
    high = vmrss(pid)
    # the burst wrote 64 MiB and kept 8; glibc keeps the rest free in the worker's heap, until a trim
    assert high - before[pid] >= 40 * MiB, (before[pid], high)
    deadline, now = time.monotonic() + 20, high
    while time.monotonic() < deadline:
        now = vmrss(pid)
        if now <= high - 40 * MiB:
            break
        time.sleep(0.05)
    assert now <= high - 40 * MiB, f"worker {pid}: VmRSS {high / MiB:.0f} MiB after the burst, {now / MiB:.0f} now"
    # and it was the trimmer of that worker (started there after the fork): its own account
    for _ in range(60):
        status, _, body = http(url + "/memgap", AUTH)
        doc = json.loads(body)
        if doc["pid"] == pid:
            break
    assert doc["pid"] == pid, "the worker that made the burst never answered /memgap"
    assert doc["trimmer"]["trims"] >= 1 and doc["trimmer"]["released"] >= 40 * MiB, doc["trimmer"]
