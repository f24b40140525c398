"""Apps for tests/test_web.py, wrapped by memgap.web's middleware, served by real servers.

  make_asgi(): a Starlette app under two ASGIMiddleware layers (uvicorn): /memgap with the
            default protection (loopback only), /memgap-token with a token (MEMGAP_TEST_TOKEN)
            and any address; no trimmer.
  make_wsgi(): a plain WSGI callable under WSGIMiddleware (gunicorn, several sync workers),
            token MEMGAP_TEST_TOKEN, and the idle trimmer with short delays.

Both apps have /echo (what the app itself received: its method, path, query, body and
headers, to show the middleware passed them through untouched) and /burst (about 64 MiB
of 100 kB blocks written, one in eight kept, the rest freed: memory glibc keeps free in its
heap until a trim; the response is the PID that did it).
"""
import functools
import json
import os

import memgap
from memgap.web import ASGIMiddleware, WSGIMiddleware

TOKEN = os.environ.get("MEMGAP_TEST_TOKEN", "")
KEPT = []


def burst():
    blocks = [b"x" * 100_000 for _ in range(640)]
    KEPT.extend(blocks[::8])
    del blocks
    return {"pid": os.getpid(), "kept": len(KEPT)}


# --- ASGI: Starlette --------------------------------------------------------------------------

def _starlette():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def echo(request):
        body = await request.body()
        return JSONResponse({"method": request.method, "path": request.url.path, "query": request.url.query,
                             "body": body.decode(), "headers": dict(request.headers)},
                            headers={"X-App": "starlette"})

    def burst_route(request):  # a plain def: Starlette runs it in its thread pool
        return JSONResponse(burst())

    return Starlette(routes=[Route("/echo", echo, methods=["GET", "POST"]), Route("/burst", burst_route)])


def make_asgi():
    """For `uvicorn --factory web_apps:make_asgi`."""
    return ASGIMiddleware(ASGIMiddleware(_starlette()), "/memgap-token", allow=None, token=TOKEN)


# --- WSGI: a plain callable ---------------------------------------------------------------------

def _plain_wsgi(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/echo":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length).decode() if length else ""
        doc = {"method": environ["REQUEST_METHOD"], "path": path, "query": environ.get("QUERY_STRING", ""),
               "body": body, "headers": {k[5:].lower().replace("_", "-"): v for k, v in environ.items()
                                         if k.startswith("HTTP_")}}
    elif path == "/burst":
        doc = burst()
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("X-App", "plain-wsgi")])
        return [b"the app's own 404\n"]
    start_response("200 OK", [("Content-Type", "application/json"), ("X-App", "plain-wsgi")])
    return [json.dumps(doc).encode()]


def make_wsgi():
    """For `gunicorn 'web_apps:make_wsgi()'`: the trimmer with short delays, so that the test
    sees a trim within a second or two of a burst."""
    trimmer = functools.partial(memgap.Trimmer, interval=0.1, quiet=1.0, min_free=1 << 20, min_gap=0.5)
    return WSGIMiddleware(_plain_wsgi, token=TOKEN, trimmer=trimmer)
