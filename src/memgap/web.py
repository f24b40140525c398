"""This process's memory on one path of a web app: ASGI and WSGI middleware.

    app = memgap.web.ASGIMiddleware(app)            # Starlette, FastAPI, any ASGI app
    app = memgap.web.WSGIMiddleware(app)            # Flask, Django, any WSGI app

``GET /memgap`` answers with the breakdown of the process that serves the request (under
gunicorn or uvicorn with several workers: the worker that got it; the ``X-Memgap-Pid``
header and the document's ``pid`` say which): the snapshot document that ``memgap inspect
--json`` writes (``memgap.snapshot/1``), or with ``?format=html`` a self-contained page.
Every other path, and every other kind of ASGI event, goes to the app untouched.

Who may ask (both apply when both are given):
  - ``allow``: the client addresses answered, default loopback only (``LOOPBACK``); None
    for any. The address is the connection's as the server gives it: behind a reverse proxy
    on the same host every request comes from loopback, so set a token there.
  - ``token``: a secret the request must carry as ``Authorization: Bearer TOKEN``.
Refused requests get 403 (address) or 401 (token), with one line of text.

``trimmer=True`` starts memgap's idle trimmer (``memgap.Trimmer``: ``malloc_trim(0)`` when
the process goes quiet after a burst), or pass a callable that makes one
(``functools.partial(memgap.Trimmer, quiet=5)``). It starts when the middleware is made and
again in each process forked after that (gunicorn ``--preload``), at its first request
(any path: a check of ``os.getpid()`` per request).

Cost: an in-process snapshot (``memgap.snapshot()``), about 5 ms in a 1 GiB process here;
under ASGI it runs in a worker thread, off the event loop, one at a time.
"""
from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from memgap.remedies import Trimmer

if TYPE_CHECKING:
    from memgap.documents.json_value import JsonObject

LOOPBACK = ("127.0.0.0/8", "::1/128")
DEFAULT_PATH = "/memgap"

Headers = list[tuple[str, str]]
Response = tuple[int, Headers, bytes]
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
TrimmerOption = bool | Callable[[], Trimmer]


def _text(status: int, line: str, extra: Headers | None = None) -> Response:
    return status, [("Content-Type", "text/plain; charset=utf-8"), *(extra or [])], f"memgap: {line}\n".encode()


class Guard:
    """Who may read the route: client addresses (networks) and a bearer token."""

    def __init__(self, allow: Sequence[str] | None = LOOPBACK, token: str | None = None) -> None:
        self.networks = None if allow is None else [ipaddress.ip_network(a, strict=False) for a in allow]
        if token is not None and not token:
            raise ValueError("memgap.web: an empty token protects nothing; give a secret or None")
        self.token = token

    def allows_address(self, host: str | None) -> bool:
        if self.networks is None:
            return True
        try:
            address = ipaddress.ip_address((host or "").split("%", 1)[0])
        except ValueError:  # a Unix socket, or no address given: not known to be allowed
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in net for net in self.networks)

    def refusal(self, host: str | None, authorization: str | None) -> Response | None:
        """None where the request may be answered, else the response that refuses it."""
        if not self.allows_address(host):
            return _text(403, f"this route answers {', '.join(map(str, self.networks or []))} only "
                              f"(not {host or 'an unknown address'})")
        if self.token is not None:
            scheme, _, given = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return _text(401, "this route needs its token: Authorization: Bearer TOKEN",
                             [("WWW-Authenticate", 'Bearer realm="memgap"')])
        return None


class _Trimming:
    """The idle trimmer of each process: started where the middleware is made, and again in a
    process forked after that (a thread does not survive fork)."""

    def __init__(self, make: Callable[[], Trimmer]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self.pid = 0
        self.trimmer: Trimmer | None = None
        self.ensure()

    def ensure(self) -> None:
        if self.pid == os.getpid():
            return
        with self._lock:
            if self.pid != os.getpid():
                self.trimmer = self._make().start()  # Unsupported (not glibc) says so at the first call
                self.pid = os.getpid()

    def stats(self) -> JsonObject:
        return asdict(self.trimmer.stats) if self.trimmer is not None else {}


class Endpoint:
    """The route, apart from any server interface: which requests it takes, and its answers."""

    def __init__(self, path: str = DEFAULT_PATH, allow: Sequence[str] | None = LOOPBACK,
                 token: str | None = None, trimmer: TrimmerOption = False) -> None:
        if not path.startswith("/"):
            raise ValueError(f"memgap.web: the path must start with '/' (got {path!r})")
        self.path = path.rstrip("/") or "/"
        self.guard = Guard(allow, token)
        make = Trimmer if trimmer is True else trimmer or None
        self.trimming = _Trimming(make) if make is not None else None
        self._snapshot_lock = threading.Lock()

    def matches(self, path: str) -> bool:
        return (path.rstrip("/") or "/") == self.path

    def check(self, method: str, host: str | None, authorization: str | None) -> Response | None:
        """The refusal of a request to the route (cheap: no snapshot), or None to answer it."""
        if method not in ("GET", "HEAD"):
            return _text(405, "GET only", [("Allow", "GET, HEAD")])
        return self.guard.refusal(host, authorization)

    def seen_request(self) -> None:
        """Every request, routed or not: a forked worker's trimmer starts at its first."""
        if self.trimming is not None:
            self.trimming.ensure()

    def answer(self, query: str) -> Response:
        """The breakdown, as the query asks (``format=json``, the default, or ``html``). Blocking."""
        fmt = (parse_qs(query).get("format") or ["json"])[-1]
        if fmt not in ("json", "html"):
            return _text(400, f"format must be json or html (got {fmt!r})")
        from memgap.api import snapshot

        with self._snapshot_lock:  # one at a time: a burst of requests does not multiply the cost
            snap = snapshot(regions=False)
        doc = snap.to_dict(regions=False)
        if self.trimming is not None:
            doc["trimmer"] = self.trimming.stats()
        headers = [("Cache-Control", "no-store"), ("X-Memgap-Pid", str(snap.pid))]
        if fmt == "html":
            from memgap.report.snapshot_html import snapshot_page

            return 200, [("Content-Type", "text/html; charset=utf-8"), *headers], snapshot_page(snap, doc).encode()
        return 200, [("Content-Type", "application/json"), *headers], json.dumps(doc, default=str).encode()


async def _in_thread(fn: Callable[[], Response]) -> Response:
    """``fn()`` in a worker thread: anyio's where it is installed (asyncio or trio), else asyncio's."""
    if _has_anyio():
        import anyio.to_thread

        return await anyio.to_thread.run_sync(fn)
    import asyncio

    return await asyncio.to_thread(fn)


@functools.lru_cache(maxsize=1)
def _has_anyio() -> bool:
    import importlib.util

    return "anyio" in sys.modules or importlib.util.find_spec("anyio") is not None


class ASGIMiddleware:
    """Answers ``path`` with this process's breakdown; everything else goes to ``app``.
    See the module's docstring for ``allow``, ``token`` and ``trimmer``."""

    def __init__(self, app: ASGIApp, path: str = DEFAULT_PATH, *, allow: Sequence[str] | None = LOOPBACK,
                 token: str | None = None, trimmer: TrimmerOption = False) -> None:
        self.app = app
        self.endpoint = Endpoint(path, allow, token, trimmer)

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        self.endpoint.seen_request()
        if scope["type"] != "http" or not self.endpoint.matches(scope["path"]):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = scope.get("query_string", b"").decode("latin-1")
        response = self.endpoint.check(scope["method"], client[0] if client else None, headers.get("authorization"))
        if response is None:
            response = await _in_thread(lambda: self.endpoint.answer(query))
        status, head, body = response
        head = [*head, ("Content-Length", str(len(body)))]
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in head]})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 405: "Method Not Allowed"}


class WSGIMiddleware:
    """Answers ``path`` with this process's breakdown; everything else goes to ``app``.
    See the module's docstring for ``allow``, ``token`` and ``trimmer``."""

    def __init__(self, app: WSGIApp, path: str = DEFAULT_PATH, *, allow: Sequence[str] | None = LOOPBACK,
                 token: str | None = None, trimmer: TrimmerOption = False) -> None:
        self.app = app
        self.endpoint = Endpoint(path, allow, token, trimmer)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        self.endpoint.seen_request()
        if not self.endpoint.matches(environ.get("PATH_INFO") or "/"):
            return self.app(environ, start_response)  # as it is: its iterable and its close() untouched
        method = environ.get("REQUEST_METHOD", "GET")
        response = self.endpoint.check(method, environ.get("REMOTE_ADDR"), environ.get("HTTP_AUTHORIZATION"))
        status, head, body = response or self.endpoint.answer(environ.get("QUERY_STRING", ""))
        start_response(f"{status} {_REASONS[status]}", [*head, ("Content-Length", str(len(body)))])
        return [b"" if method == "HEAD" else body]
