"""A single-worker asyncio HTTP service (standard library only, no memgap), as the field report's FastAPI
service on one uvicorn worker: mostly I/O. Each request decodes a JSON payload of 1000 strings of 3000
characters (each one glibc's malloc, all in the main arena: one thread), then awaits 0.2 s (its database
and Redis reads, its blob upload) holding them, keeps one in 32 in a bounded cache (per-stream state) and
frees the rest: what a burst of concurrent requests held stays pinned below the cache's strings, where
glibc's trim at the top of the heap never reaches it. SIGTERM shuts it down cleanly, as uvicorn does.

    python async_server.py PORT
"""
import asyncio
import json
import signal
import sys

BUFFERS = 1000   # per request: 3 MB of 3000-character strings
KEEP_EVERY = 32  # one string in 32 stays, in a cache of the last 32 requests' (about 3 MB at most)
IO_WAIT = 0.2    # seconds each request awaits its I/O
PAYLOAD = json.dumps([f"{k:05d}" + "x" * 2995 for k in range(BUFFERS)])
KEEP: dict[int, list[str]] = {}
served = 0


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    global served
    try:
        while (await reader.readline()) not in (b"\r\n", b""):  # the request line and headers
            pass
        chunks = json.loads(PAYLOAD)
        await asyncio.sleep(IO_WAIT)
        served += 1
        KEEP[served % 32] = chunks[::KEEP_EVERY]
        del chunks
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
    finally:
        writer.close()


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), backlog=64)
    async with server:
        await stop.wait()


asyncio.run(main())
