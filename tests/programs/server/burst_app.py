"""A plain ASGI app (no memgap, no framework): each request decodes a burst of
small buffers, holds them across an await (so a burst of concurrent requests
holds them all at once, as field report 001's SSE decoders did) and keeps one in
sixteen in a bounded cache, as a streaming service keeps per-stream state; glibc
keeps the pages the rest freed."""
import asyncio

KEEP: dict[int, list[bytes]] = {}
served = 0


async def app(scope, receive, send):
    global served
    if scope["type"] != "http":
        return
    chunks = [bytes(3000) for _ in range(5000)]
    await asyncio.sleep(0.05)
    served += 1
    KEEP[served % 64] = chunks[::16]
    del chunks
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
