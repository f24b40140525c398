"""A service that knows nothing of memgap and never exits by itself: the standard
library's threaded HTTP server, whose handler decodes a burst of small buffers and
keeps one in sixteen (per-stream state), so glibc keeps the pages the rest freed.

    python http_service.py PORT
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEEP: dict[int, list[bytes]] = {}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        chunks = [bytes(3000) for _ in range(4000)]
        KEEP[len(KEEP) % 64] = chunks[::16]
        del chunks
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
