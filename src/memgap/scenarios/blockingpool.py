"""Seed 004 (Python version): a blocking pool whose memory grows with
concurrency and payload size.

A pool of ``concurrency`` threads (a web frontend's blocking workers) serves
``requests`` requests. Each request materializes its ``payload_kib`` KiB body
on the worker thread, parses and transforms it (decode, split into rows,
rewrite, re-encode, compress: a temporary of the payload's size at every
step) and returns a small response. Nothing outlives a request but its small
response, yet the idle process stays far above its post-import size, and more
so with more threads and larger payloads: each thread allocates from its own
glibc arena and each arena keeps what it once held.

    python -m memgap.scenarios.blockingpool --concurrency 16 --requests 2000 --payload-kib 200
"""
from __future__ import annotations

import gc
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypedDict

from memgap.scenarios import _common

NAME = "blockingpool"


def build_template(payload_kib: int) -> bytes:
    """A CSV-ish request body of ``payload_kib`` KiB (one shared template;
    every request copies it into a fresh buffer of its own)."""
    rows = []
    size = 0
    i = 0
    target = payload_kib * 1024
    while size < target:
        row = (
            f"{i},user-{i * 7919 % 100003:06d},{(i * 37) % 1000 / 7:.4f},"
            f"{'ok' if i % 5 else 'retry'},region-{i % 13},"
            f"{'x' * (i % 23)}\n"
        )
        rows.append(row)
        size += len(row)
        i += 1
    return "".join(rows).encode("ascii")[:target]


class Response(TypedDict):
    """A request's small response: its id, what it parsed, and the compressed reply body."""

    id: int
    rows: int
    retried: int
    reply: bytes


def handle(request_id: int, template: bytes) -> Response:
    """Serve one request on a pool thread; return a small response.

    The response carries the compressed reply body, which the caller (the
    event loop) sends and frees: a buffer allocated in this thread's arena
    and freed by another thread, after this thread has moved on.
    """
    body = b"%08d\n" % request_id + template[9:]    # the request's own payload buffer
    text = body.decode("ascii")                      # parse ...
    rows = text.splitlines()
    retried = text.count(",retry,")
    rewritten = "\n".join(rows).upper()              # ... transform ...
    encoded = rewritten.encode("ascii")
    reply = zlib.compress(encoded, 1)                # ... and encode a reply
    return {"id": request_id, "rows": len(rows), "retried": retried, "reply": reply}


def main(argv: Sequence[str] | None = None) -> int:
    args = _common.parse_knobs(NAME, argv, bounds={"rest": (0, None)})
    _common.mark("post-import")

    template = build_template(args.payload_kib)
    started = time.monotonic()
    with ThreadPoolExecutor(
        max_workers=args.concurrency, thread_name_prefix="blocking"
    ) as pool:
        responses = pool.map(handle, range(args.requests), [template] * args.requests)
        served = 0
        rows = 0
        sent = 0
        for response in responses:  # the event loop "sends" each reply, then drops it
            served += 1
            rows += response["rows"]
            sent += len(response["reply"])
        del response
        del responses
        gc.collect()
        threads_alive = sum(1 for t in threading.enumerate() if t.name.startswith("blocking"))
        elapsed = time.monotonic() - started
        _common.mark("post-requests")
        # the pool's threads stay alive through idle, as a server's would
        _common.idle(args.rest)
    _common.result(
        NAME,
        served=served,
        rows=rows,
        sent_kib=sent // 1024,
        threads_alive=threads_alive,
        req_per_s=f"{served / max(elapsed, 1e-9):.0f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
