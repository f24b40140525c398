"""memgap.web.ASGIMiddleware in a real uvicorn serving a Starlette app (programs/web_apps.py),
requested over loopback: the breakdown against the server's VmRSS read here at the same
time, the same figures in the HTML, the app's own paths untouched, the refusals."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import HERE, child_env
from helpers import MiB, html_figures, http, memgap, self_contained, vmrss

TOKEN = "s3cret-asgi"
SLACK = 512 << 10  # what the request itself may move VmRSS by, beyond the range read around it


@pytest.fixture(scope="module")
def server():
    env = child_env(MEMGAP_TEST_TOKEN=TOKEN)
    env.pop("FORWARDED_ALLOW_IPS", None)  # uvicorn's default: trust X-Forwarded-For from loopback only
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--app-dir", os.path.join(HERE, "programs"),
                             "--factory", "web_apps:make_asgi", "--host", "127.0.0.1", "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            m = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if m:
                break
        else:
            pytest.fail(f"uvicorn did not start: {''.join(seen)}")
        yield proc, m.group(1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


def breakdown(url, pid, path="/memgap", headers=None):
    """The JSON document, with the server's VmRSS read just before and just after the request."""
    before = vmrss(pid)
    status, head, body = http(url + path, headers)
    after = vmrss(pid)
    assert status == 200, body
    assert head["Content-Type"] == "application/json" and head["X-Memgap-Pid"] == str(pid)
    return json.loads(body), before, after


def test_the_breakdown_is_the_serving_process_and_the_inspect_document(server):
    proc, url = server
    http(url + "/memgap")  # a first request imports what the snapshot needs
    doc, before, after = breakdown(url, proc.pid)
    assert doc["schema"] == "memgap.snapshot/1" and doc["pid"] == proc.pid and doc["route"] == "in-process"
    assert min(before, after) - SLACK <= doc["rss"] <= max(before, after) + SLACK, (doc["rss"], before, after)
    layers = {k: v["resident"] for k, v in doc["layers"].items() if v["resident"] is not None}
    assert sum(layers.values()) + doc["unexplained"] == doc["rss"]
    # the kernel's own split, read in the same snapshot: anonymous layers against RssAnon
    anon = sum(v for k, v in layers.items() if k not in ("files", "shared_memory"))
    assert abs(anon - doc["status"]["RssAnon"]) <= 0.03 * doc["rss"] + MiB
    # the document `memgap inspect PID --json` writes of the same process: the same fields and layers
    out = memgap("inspect", str(proc.pid), "--json", "-")
    assert out.returncode == 0, out.stderr
    outside = json.loads(out.stdout)
    assert set(outside) == set(doc) and set(outside["layers"]) == set(doc["layers"])
    assert abs(outside["rss"] - doc["rss"]) <= 0.05 * doc["rss"] + MiB


def test_the_html_page_holds_the_same_figures(server):
    proc, url = server
    before = vmrss(proc.pid)
    status, head, body = http(url + "/memgap?format=html")
    after = vmrss(proc.pid)
    assert status == 200 and head["Content-Type"] == "text/html; charset=utf-8"
    page = body.decode()
    self_contained(page)
    rows, doc = html_figures(page)
    assert doc["pid"] == proc.pid and f"PID {proc.pid}" in page
    assert min(before, after) - SLACK <= rows["rss"] <= max(before, after) + SLACK, (rows["rss"], before, after)
    assert rows["rss"] == doc["rss"] and rows["unexplained"] == doc["unexplained"]
    assert {k: v for k, v in rows.items() if k not in ("rss", "unexplained")} == \
        {k: v["resident"] for k, v in doc["layers"].items() if v["resident"] is not None}
    assert sum(v for k, v in rows.items() if k != "rss") == rows["rss"]
    # the MiB shown is the bytes' own figure
    shown = re.search(r'<tr data-layer="rss"[^>]*>.*?</td><td>([\d.]+)</td>', page).group(1)
    assert shown == f"{rows['rss'] / MiB:.1f}"


def test_every_other_path_goes_to_the_app_untouched(server):
    _, url = server
    status, head, body = http(url + "/echo?a=1&format=html", {"X-Custom": "kept", "Authorization": "Bearer app's"},
                              data=b"payload", method="POST")
    assert status == 200 and head["X-App"] == "starlette"
    echo = json.loads(body)
    assert (echo["method"], echo["path"], echo["query"], echo["body"]) == ("POST", "/echo", "a=1&format=html",
                                                                           "payload")
    assert echo["headers"]["x-custom"] == "kept" and echo["headers"]["authorization"] == "Bearer app's"
    for path in ("/nowhere", "/memgapx", "/memgap/more"):
        status, _, body = http(url + path)
        assert (status, body) == (404, b"Not Found"), (path, status, body)  # Starlette's own 404
    # a client the route refuses still reaches the app's paths
    status, _, _ = http(url + "/echo", {"X-Forwarded-For": "203.0.113.9"})
    assert status == 200


def test_who_may_ask(server):
    proc, url = server
    # uvicorn takes the client's address from X-Forwarded-For when a proxy on loopback sends it:
    # a remote client behind a local proxy is refused by the default (loopback only)
    status, _, body = http(url + "/memgap", {"X-Forwarded-For": "203.0.113.9"})
    assert status == 403 and b"203.0.113.9" in body and b"127.0.0.0/8" in body
    status, head, _ = http(url + "/memgap", method="POST", data=b"")
    assert status == 405 and head["Allow"] == "GET, HEAD"
    status, _, body = http(url + "/memgap?format=xml")
    assert status == 400 and b"json or html" in body
    # /memgap-token: any address, its token required
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, head, _ = http(url + "/memgap-token", headers)
        assert status == 401 and head["WWW-Authenticate"].startswith("Bearer"), headers
    doc, _, _ = breakdown(url, proc.pid, "/memgap-token",
                          {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": "203.0.113.9"})
    assert doc["pid"] == proc.pid
    status, head, body = http(url + "/memgap", method="HEAD")
    assert status == 200 and body == b"" and int(head["Content-Length"]) > 1000


def test_without_the_trimmer_a_burst_stays_resident(server):
    """The control for the WSGI test's trimmer: here no trimmer runs, and what a burst freed
    stays in the process (glibc keeps it) for longer than the trimmer there takes to trim."""
    proc, url = server
    before = vmrss(proc.pid)
    status, _, body = http(url + "/burst")
    assert status == 200 and json.loads(body)["pid"] == proc.pid
    after_burst = vmrss(proc.pid)
    assert after_burst - before >= 40 * MiB, (before, after_burst)
    time.sleep(2.5)  # the WSGI test's trimmer: 0.1 s checks, quiet for 1 s, then a trim
    assert vmrss(proc.pid) >= after_burst - 4 * MiB
