"""The HTTP side of ``memgap serve-metrics``: a small server that stays bounded whoever connects.

memgap runs as root on machines where other users' processes live, and serves figures about
them; so its server is built for clients that misbehave:

- One thread (``serve_forever``) accepts connections and reads their request heads without
  blocking, TLS handshakes included: an idle or slow connection costs a file descriptor and
  a few bytes, not a thread. At most ``max_open`` connections may be sending their request;
  beyond that the oldest one is closed to make room (a scraper sends its request at once, an
  idle connection makes way). Each must send its whole head within ``read_timeout`` seconds
  from its connection (a total, not per byte: one byte a second is cut off) and at most
  ``MAX_HEAD`` bytes of it (431 beyond).
- A fixed pool of ``workers`` threads answers complete requests, from a queue of at most
  ``queue`` of them (503 beyond); each answer is written within ``write_timeout`` seconds.
- Optional TLS (a certificate and key, ``ssl``) and credentials (HTTP basic, a bearer token:
  read from files, so they are not in ``ps``); a request without them gets 401.

Requests are parsed here (``parse_head``: method, path, headers; HTTP/1.0 and 1.1, one request
per connection, then closed), pure and fuzzed. What a path serves is the caller's (``Page``).
"""
from __future__ import annotations

import base64
import binascii
import hmac
import queue
import selectors
import socket
import ssl
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from memgap.errors import MemgapError

MAX_HEAD = 16 << 10  # request line and headers: a scraper's is ~200 bytes; Go's net/http allows 1 MiB
READ_TIMEOUT = 5.0   # s from the connection to the end of the request head (TLS handshake included)
WRITE_TIMEOUT = 10.0  # s to write an answer (the figures of a 16-worker tree: ~100 KiB)
WORKERS = 4          # answers at once: a scrape reads a collection made beforehand, or (refresh 0) waits for one
QUEUE = 16           # complete requests waiting for a worker
MAX_OPEN = 256       # connections still sending their request

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self, head_only: bool = False) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Error')}",
                 f"Content-Type: {self.content_type}", f"Content-Length: {len(self.body)}", "Connection: close",
                 *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else self.body)


def _plain(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, text.encode() + b"\n", headers=headers)


@dataclass(frozen=True)
class Request:
    method: str
    path: str                       # the target without its query
    headers: dict[str, str] = field(default_factory=dict)  # names lowercased


class BadRequest(ValueError):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


def head_end(buf: bytes | bytearray) -> int:
    """Where the request head ends (after its blank line), or -1 while it has not."""
    ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n") if (i := buf.find(sep)) >= 0]
    return min(ends) if ends else -1


def parse_head(head: bytes) -> Request:
    """The request line and headers of one request (raises BadRequest with the status to answer)."""
    if len(head) > MAX_HEAD:
        raise BadRequest(431, f"request head over {MAX_HEAD} bytes")
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise BadRequest(400, "empty request")
    words = lines[0].split(" ")
    if len(words) != 3 or not words[0] or not set(words[0]) <= _TOKEN or not words[1].startswith("/"):
        raise BadRequest(400, "bad request line")
    if words[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(505 if words[2].startswith("HTTP/") else 400, f"version {words[2][:16]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or not set(name) <= _TOKEN:
            raise BadRequest(400, "bad header line")
        key = name.lower()
        if key in headers and key in ("authorization", "host", "content-length"):
            raise BadRequest(400, f"{name} given twice")
        headers[key] = value.strip(" \t")
    return Request(words[0], words[1].split("?", 1)[0], headers)


@dataclass(frozen=True)
class Credentials:
    """Who may read: HTTP basic users (name, password) and/or a bearer token; none: anyone."""

    users: tuple[tuple[str, str], ...] = ()
    token: str | None = None

    @property
    def required(self) -> bool:
        return bool(self.users) or self.token is not None

    def allows(self, authorization: str | None) -> bool:
        if not self.required:
            return True
        scheme, _, value = (authorization or "").strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(value.encode(), self.token.encode())
        if scheme.lower() == "basic" and self.users:
            try:
                user, colon, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            # every user compared, so the time taken does not say which names exist
            found = [hmac.compare_digest(f"{user}:{password}".encode(), f"{u}:{p}".encode()) for u, p in self.users]
            return bool(colon) and any(found)
        return False

    def challenge(self) -> tuple[tuple[str, str], ...]:
        return (("WWW-Authenticate", 'Basic realm="memgap"' if self.users else 'Bearer realm="memgap"'),)


@dataclass(frozen=True)
class WebConfig:
    """Where and how to serve: the address, TLS, who may read, and the bounds above."""

    host: str = "127.0.0.1"
    port: int = 9555
    tls: ssl.SSLContext | None = None
    credentials: Credentials = Credentials()
    read_timeout: float = READ_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT
    workers: int = WORKERS
    queue: int = QUEUE
    max_open: int = MAX_OPEN


Page = Callable[[str], Response]  # path -> what to answer (a GET; HEAD drops the body)


def answer(request: Request, page: Page, credentials: Credentials) -> Response:
    """The response to a parsed request: credentials first, then the method, then the page."""
    if not credentials.allows(request.headers.get("authorization")):
        return _plain(401, "unauthorized", credentials.challenge())
    if request.method not in ("GET", "HEAD"):
        return _plain(405, "only GET and HEAD", (("Allow", "GET, HEAD"),))
    return page(request.path)


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context (TLS 1.2 at least) with the certificate chain and its key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise MemgapError(f"serve-metrics: cannot load the TLS certificate {cert_file} with key {key_file}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    return context


@dataclass
class _Pending:
    """A connection still sending its request head (or its TLS handshake)."""

    sock: socket.socket
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    handshaking: bool = False


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _try_send(sock: socket.socket, response: Response) -> None:
    """An answer from the accepting thread, never blocking it: sent if the socket takes it at once."""
    try:
        sock.send(response.encode())
    except (OSError, ssl.SSLError):
        pass


class MetricsServer:
    """Bound at construction (a MemgapError where it cannot be); ``serve_forever`` accepts and reads
    requests in the calling thread and answers them from ``config.workers`` threads."""

    def __init__(self, config: WebConfig, page: Page, log: TextIO | None = None) -> None:
        self.config, self.page = config, page
        self._log = log if log is not None else sys.stderr
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait
            self._listener.bind((config.host, config.port))
            self._listener.listen(128)
        except OSError as exc:
            self._listener.close()
            raise MemgapError(f"serve-metrics: cannot listen on {config.host}:{config.port}: "
                              f"{exc.strerror or exc}") from None
        self._listener.setblocking(False)
        self._pending: OrderedDict[int, _Pending] = OrderedDict()  # oldest first: its deadline comes first
        self._queue: queue.Queue[tuple[socket.socket, bytes]] = queue.Queue(config.queue)
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def serve_forever(self) -> None:
        for i in range(self.config.workers):
            threading.Thread(target=self._work, name=f"memgap-http-{i}", daemon=True).start()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        while not self._stop.is_set():
            for key, _ in self._selector.select(self._next_timeout()):
                if key.data is None:
                    self._accept()
                else:
                    self._readable(key.data)
            self._expire()

    def shutdown(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for pending in list(self._pending.values()):
            self._drop(pending)
        self._selector.close()
        _close(self._listener)

    # -- the accepting thread

    def _next_timeout(self) -> float:
        if not self._pending:
            return 0.5
        oldest = next(iter(self._pending.values()))
        return min(0.5, max(0.0, oldest.deadline - time.monotonic()))

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time: the connections already open are read in between
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError:  # out of descriptors (EMFILE) or memory: make room, try again next round
                if not self._evict_oldest():
                    time.sleep(0.01)
                return
            if len(self._pending) >= self.config.max_open:
                self._evict_oldest()
            self._open(sock)

    def _open(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        pending = _Pending(sock, time.monotonic() + self.config.read_timeout)
        if self.config.tls is not None:
            try:
                pending.sock = self.config.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ssl.SSLError):
                _close(sock)
                return
            pending.handshaking = True
        self._selector.register(pending.sock, selectors.EVENT_READ, pending)
        self._pending[id(pending)] = pending

    def _readable(self, pending: _Pending) -> None:
        """Read what the connection sent; once its head is complete, queue it for a worker."""
        sock, end = pending.sock, -1
        try:
            if pending.handshaking:
                assert isinstance(sock, ssl.SSLSocket)
                sock.do_handshake()
                pending.handshaking = False
            while end < 0 and len(pending.buf) <= MAX_HEAD:
                chunk = sock.recv(4096)
                if not chunk:  # the client gave up
                    self._drop(pending)
                    return
                pending.buf += chunk
                end = head_end(pending.buf)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return  # more later (a handshake that must write is a full send buffer: rare, the deadline holds)
        except (OSError, ssl.SSLError):
            self._drop(pending)
            return
        self._unwatch(pending)
        if end < 0:
            _try_send(sock, _plain(431, f"request head over {MAX_HEAD} bytes"))
            _close(sock)
            return
        try:
            self._queue.put_nowait((sock, bytes(pending.buf[:end])))
        except queue.Full:
            _try_send(sock, _plain(503, "busy: every worker is answering and the queue is full"))
            _close(sock)

    def _unwatch(self, pending: _Pending) -> None:
        self._pending.pop(id(pending), None)
        try:
            self._selector.unregister(pending.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, pending: _Pending) -> None:
        self._unwatch(pending)
        _close(pending.sock)

    def _evict_oldest(self) -> bool:
        if not self._pending:
            return False
        self._drop(next(iter(self._pending.values())))
        return True

    def _expire(self) -> None:
        """Close the connections whose head did not arrive within the read timeout (oldest first)."""
        now = time.monotonic()
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.deadline > now:
                return
            if not oldest.handshaking:
                _try_send(oldest.sock, _plain(408, f"request not sent within {self.config.read_timeout:g} s"))
            self._drop(oldest)

    # -- the workers

    def _work(self) -> None:
        while True:
            sock, head = self._queue.get()
            try:
                self._respond(sock, head)
            except (OSError, ssl.SSLError):
                pass  # the client left, or did not read the answer within the write timeout
            except Exception as exc:  # noqa: BLE001 - a bug must not end a worker: the pool would shrink
                print(f"memgap: serve-metrics: answering failed: {exc!r}", file=self._log, flush=True)
            finally:
                _close(sock)

    def _respond(self, sock: socket.socket, head: bytes) -> None:
        head_only = False
        try:
            request = parse_head(head)
        except BadRequest as exc:
            response = _plain(exc.status, str(exc))
        else:
            head_only = request.method == "HEAD"
            try:
                response = answer(request, self.page, self.config.credentials)
            except Exception as exc:  # noqa: BLE001 - a bug must not end the server: Prometheus sees the scrape fail
                response = _plain(500, f"memgap: scrape failed: {exc}")
        self._send(sock, response.encode(head_only))

    def _send(self, sock: socket.socket, data: bytes) -> None:
        """All of ``data`` within the write timeout (a total: a client reading slowly is cut off)."""
        deadline = time.monotonic() + self.config.write_timeout
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer was not read within the write timeout")
            sock.settimeout(left)
            view = view[sock.send(view):]
