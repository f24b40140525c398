"""Fuzzing memgap's HTTP server (serve-metrics'), run in this process on a loopback port: malformed
request lines and headers, huge headers, binary, get a status line of their own or a closed connection."""
import re
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

_LINES = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"GET /metrics HTTP/1.1", b"GET / HTTP/1.0", b"HEAD /metrics HTTP/1.1", b"POST /metrics HTTP/1.1",
                     b"GET /metrics HTTP/2.0", b"GET metrics HTTP/1.1", b"GET  /metrics HTTP/1.1", b"\x16\x03\x01",
                     b"Host: x", b"Authorization: Bearer x", b"Authorization: Basic !!", b"X: " + b"y" * 20000,
                     b": no name", b"no colon", b"Content-Length: -1", b"Authorization: a", b"\xff\xfe"]))


@pytest.fixture(scope="module")
def web_server():
    """memgap's HTTP server in this process, answering every path with "ok" behind a bearer token."""
    from memgap.metrics.server import Credentials, MetricsServer, Response, WebConfig

    server = MetricsServer(WebConfig(port=0, read_timeout=0.5, credentials=Credentials(token="t0ken")),
                           lambda path: Response(200, b"ok\n"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.address
    server.shutdown()
    thread.join()
    server.close()


def _exchange(address, data, half_close=True):
    with socket.create_connection(address, timeout=10) as conn:
        try:
            conn.sendall(data)
            if half_close:
                conn.shutdown(socket.SHUT_WR)  # what follows the head never comes: answered or closed at once
        except OSError:  # the server closed first (a head over the limit): it may not read it all
            pass
        reply = b""
        try:
            while chunk := conn.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    return reply


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_LINES, max_size=8), st.sampled_from([b"\r\n", b"\n"]), st.booleans())
def test_serve_metrics_answers_any_request_or_closes(web_server, lines, newline, ended):
    """Malformed lines, headers, huge headers, binary: a status line of its own or a closed connection,
    never a crash, a hang or a 200 without the token; and a good request is answered after each."""
    data = newline.join(lines) + (newline * 2 if ended else b"")
    reply = _exchange(web_server, data)
    if reply:
        status = re.match(rb"HTTP/1\.1 (\d{3}) ", reply)
        assert status and int(status[1]) in (400, 401, 405, 408, 431, 505), reply[:100]
    good = _exchange(web_server, b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer t0ken\r\n\r\n")
    assert good.startswith(b"HTTP/1.1 200 OK\r\n") and good.endswith(b"\r\n\r\nok\n"), good
