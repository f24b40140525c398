"""A plain threaded HTTP service (standard library only, no memgap): each request runs in a
thread of its own (ThreadingHTTPServer), decodes a JSON payload of 2000 strings of 3000
characters (each one glibc's malloc, in that thread's arena), holds them across a short
wait, so that a burst of concurrent requests holds them all at once, keeps one in 32 in a
bounded cache, as a streaming service keeps per-stream state, and frees the rest. SIGTERM
shuts it down cleanly, as uvicorn does.

    python thread_server.py PORT
"""
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUFFERS = 2000   # per request: 6 MB of 3000-character strings
KEEP_EVERY = 32  # one string in 32 stays, in a cache of the last 32 requests' (about 6 MB at most)
PAYLOAD = json.dumps([f"{k:05d}" + "x" * 2995 for k in range(BUFFERS)])  # what each request decodes
KEEP: dict[int, list[bytes]] = {}
lock = threading.Lock()
served = 0


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        global served
        chunks = json.loads(PAYLOAD)
        time.sleep(0.05)
        with lock:
            served += 1
            KEEP[served % 32] = chunks[::KEEP_EVERY]
        del chunks
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 drops a burst's SYNs beyond it: 1 s more for each, by TCP's retry


def main() -> None:
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever(poll_interval=0.5)
    server.server_close()


main()
