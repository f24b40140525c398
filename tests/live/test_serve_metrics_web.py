"""`memgap serve-metrics` against clients a hostile or careless user would point at it (issue 23):
a thousand idle connections, one byte a second, no credentials or wrong ones, plain HTTP to
its TLS port; its listening address as the kernel shows it; and a PID that another process
takes (a real reuse, in a PID namespace of the test's own).

The server is the real command (a subprocess), its target a plain Python program
(programs/metrics_targets.py); what the server holds is read from its /proc (Threads, VmRSS,
its sockets in /proc/net/tcp), not from memgap.
"""
import base64
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from test_serve_metrics import TARGETS_PY, parse, read_line, samples, start, stop

from conftest import HERE, child_env
from helpers import MiB, memgap

REUSE_DRIVER = os.path.join(HERE, "programs", "pid_reuse.py")


class Server:
    """The real command on a free port, with the options given; the URL it prints is served."""

    def __init__(self, *args):
        self.proc = start("-m", "memgap", "serve-metrics", "--port", "0", *args)
        line = read_line(self.proc)
        found = re.match(r"memgap: serving (https?)://([\d.]+):(\d+)/metrics ", line)
        assert found, line
        self.scheme, self.host, self.port = found[1], found[2], int(found[3])
        self.url = f"{self.scheme}://{self.host}:{self.port}/metrics"

    def status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))

    def get(self, headers=None, context=None, url=None):
        """(status, body text, response headers) of one GET; an HTTP error is an answer too."""
        req = urllib.request.Request(url or self.url, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30, context=context) as resp:
                return resp.status, resp.read().decode(), resp.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers

    def close(self):
        stop(self.proc)


@pytest.fixture
def sleeper():
    proc = start(TARGETS_PY, "sleep", f"web-{uuid.uuid4().hex[:12]}")
    pid = int(read_line(proc).split()[1])
    yield pid
    stop(proc)


@pytest.fixture
def serve():
    made = []

    def serve(*args):
        made.append(Server(*args))
        return made[-1]

    yield serve
    for s in made:
        s.close()


def closed_by_server(sock, within):
    """Whether the server ends the connection within ``within`` s (an answer before EOF allowed)."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_a_thousand_idle_connections_and_one_byte_a_second(serve, sleeper):
    """The issue's figures: 1,000 idle connections held 1,002 threads for 60 s. Now the threads stay
    as they were, a scrape is answered meanwhile, and every idle connection (and a client sending
    one byte a second) is closed by the read timeout, a total from its connection."""
    server = serve("--read-timeout", "2", str(sleeper))
    assert server.get()[0] == 200
    threads, rss = server.status("Threads"), server.status("VmRSS") * 1024
    idle = [socket.create_connection((server.host, server.port), timeout=30) for _ in range(1000)]
    slow = socket.create_connection((server.host, server.port), timeout=30)
    stop_slow = threading.Event()
    sent = []

    def one_byte_a_second():
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n":
            if stop_slow.wait(1.0):
                return
            try:
                slow.send(bytes([byte]))
                sent.append(byte)
            except OSError:
                return

    dribbler = threading.Thread(target=one_byte_a_second)
    dribbler.start()
    opened = time.monotonic()
    try:
        code, body, _ = server.get()
        assert code == 200 and samples(parse(body), "memgap_rss_bytes"), body[:200]
        assert server.status("Threads") == threads, (server.status("Threads"), threads)
        grown = server.status("VmRSS") * 1024 - rss
        assert grown < 8 * MiB, grown  # 26 MiB before (29 -> 55 MB in the issue)
        assert closed_by_server(slow, 30) and len(sent) < 10, sent  # cut off after ~2 s, not after 35 bytes
        still_open = [s for s in idle if not closed_by_server(s, max(0.01, opened + 30 - time.monotonic()))]
        assert not still_open, f"{len(still_open)} of 1000 idle connections left open 30 s after the read timeout"
        assert server.get()[0] == 200 and server.status("Threads") == threads
    finally:
        stop_slow.set()
        dribbler.join()
        for s in [*idle, slow]:
            s.close()


def listening_addresses(pid):
    """(address, port) of every TCP socket in LISTEN that process ``pid`` holds, from /proc/net/tcp."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            words = line.split()
            if words[3] == "0A" and words[9] in inodes:  # 0A: LISTEN
                host, port = words[1].split(":")
                found.append((socket.inet_ntoa(bytes.fromhex(host)[::-1]), int(port, 16)))
    return found


def local_addresses():
    """This machine's IPv4 addresses other than loopback (/proc/net/fib_trie's LOCAL entries)."""
    with open("/proc/net/fib_trie") as fh:
        text = fh.read()
    return sorted({a for a in re.findall(r"\|-- ([\d.]+)\n\s+/32 host LOCAL", text) if not a.startswith("127.")})


def test_it_listens_on_loopback_unless_told(serve, sleeper):
    server = serve(str(sleeper))
    assert listening_addresses(server.proc.pid) == [("127.0.0.1", server.port)]
    for address in local_addresses():  # this machine's own other addresses do not reach it
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, server.port), timeout=10).close()
    everywhere = serve("--address", "0.0.0.0", str(sleeper))
    assert listening_addresses(everywhere.proc.pid) == [("0.0.0.0", everywhere.port)]
    line = everywhere.proc.stderr.readline()  # said: reachable, and no credentials asked
    assert "is reachable from other machines and no credentials are asked" in line, line


def secret(tmp_path, name, text, mode=0o600):
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_credentials_wrong_or_missing_get_401(serve, sleeper, tmp_path):
    token = uuid.uuid4().hex
    server = serve("--bearer-token-file", secret(tmp_path, "token", token + "\n"),
                   "--basic-auth-file", secret(tmp_path, "users", "# who may read\nprometheus:s3cret\n"), str(sleeper))
    basic = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
    code, _, headers = server.get()
    assert code == 401 and headers["WWW-Authenticate"] == 'Basic realm="memgap"'
    for wrong in (f"Bearer {token[:-1]}", f"Bearer {token}x", "Bearer ", "Basic " +
                  base64.b64encode(b"prometheus:s3cre").decode(), "Basic !!!", basic.lower(), token):
        assert server.get({"Authorization": wrong})[0] == 401, wrong
    for right in (f"Bearer {token}", basic):
        code, body, _ = server.get({"Authorization": right})
        assert code == 200 and samples(parse(body), "memgap_rss_bytes"), right
    assert server.get({"Authorization": basic}, url=server.url.replace("/metrics", "/"))[0] == 200


def test_a_credentials_file_others_may_read_is_refused(sleeper, tmp_path):
    loose = secret(tmp_path, "token", "abc\n", 0o644)
    proc = memgap("serve-metrics", "--port", "0", "--bearer-token-file", loose, str(sleeper))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"may be read by other users (mode 0644): chmod 600 {loose}" in proc.stderr


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs the openssl command")
def test_tls_with_a_self_signed_certificate(serve, sleeper, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    token = uuid.uuid4().hex
    server = serve("--tls-cert-file", str(cert), "--tls-key-file", str(key), "--read-timeout", "2",
                   "--bearer-token-file", secret(tmp_path, "token", token), str(sleeper))
    assert server.scheme == "https"
    trusting = ssl.create_default_context(cafile=str(cert))  # the certificate checked, name and all
    code, body, _ = server.get({"Authorization": f"Bearer {token}"}, context=trusting)
    assert code == 200 and samples(parse(body), "memgap_rss_bytes")
    assert server.get(context=trusting)[0] == 401
    with pytest.raises(urllib.error.URLError):  # a client that does not trust it
        server.get({"Authorization": f"Bearer {token}"}, context=ssl.create_default_context())
    plain = socket.create_connection((server.host, server.port), timeout=30)  # plain HTTP to the TLS port
    plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert closed_by_server(plain, 30)
    plain.close()


# --- a PID that another process takes -------------------------------------------------------

def test_a_pid_that_is_no_longer_the_process_found_is_served_as_gone(sleeper):
    """The Scraper with the identity it recorded at the start; a real process now has the PID but
    started at another tick (as a process that took a reused PID would)."""
    import io

    from memgap.metrics.scrape import Scraper, Selection
    from memgap.sources.processes import ProcessIdentity

    now = ProcessIdentity.of(sleeper)
    log = io.StringIO()
    same = Scraper(Selection(pid=sleeper), log=log, pinned=now)
    assert len(same.targets()) == 1 and "memgap_target_up 1" in same.scrape()
    earlier = Scraper(Selection(pid=sleeper), log=log, pinned=ProcessIdentity(sleeper, now.start_time - 1))
    for _ in range(2):
        assert earlier.targets() == [] and earlier.up is False
    families = parse(earlier.scrape())
    assert samples(families, "memgap_target_up") == [({}, 0.0)] and not samples(families, "memgap_rss_bytes")
    assert log.getvalue().count("\n") == 1 and f"PID {sleeper} was reused by another process" in log.getvalue()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_a_real_pid_reuse_is_not_followed():
    """In a PID namespace of its own (unshare), a driver starts a target and serve-metrics for its
    PID, then kills the target and makes the next process take the same PID (ns_last_pid): the
    series go, memgap_target_up turns 0, one line says why, and the new process is not read."""
    driver = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, REUSE_DRIVER],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env(), start_new_session=True)
    try:
        said = read_line(driver).split()
        assert said[0] == "serving", said
        pid, url = int(said[1]), said[2]
        with urllib.request.urlopen(url, timeout=30) as resp:
            families = parse(resp.read().decode())
        assert len(samples(families, "memgap_rss_bytes")) == 1 and samples(families, "memgap_target_up") == [({}, 1)]
        driver.stdin.write("reuse\n")
        driver.stdin.flush()
        said = read_line(driver).split()
        assert said == ["reused", str(pid)], said  # a new process has the PID now
        with urllib.request.urlopen(url, timeout=30) as resp:
            families = parse(resp.read().decode())
        assert not samples(families, "memgap_rss_bytes") and samples(families, "memgap_target_up") == [({}, 0)]
        driver.stdin.write("log\n")
        driver.stdin.flush()
        logged = list(iter(driver.stdout.readline, "end\n"))
        assert len(logged) == 1 and f"PID {pid} was reused by another process" in logged[0], logged
    finally:
        stop(driver)
