"""A plain WSGI app (no framework, no memgap) whose import builds a table of small dicts:
860,000 rows of {"id": i, "tags": [i]}, about 203 MiB of objects the collector tracks
(each row and its list, as sys.getsizeof counts them: the GC header included). Served by
gunicorn --preload, the master builds it once and its forked workers share it.

    GET /row/N   a full gc.collect() (as a busy worker eventually runs one), then row N
    GET /size    the table's tracked bytes, counted here: "BYTES TRACKED_ROWS"
Each answer ends with the serving process's PID.
"""
import gc
import os
import sys

ROWS = 860_000
table = [{"id": i, "tags": [i]} for i in range(ROWS)]  # a list inside: both are tracked for good


def _answer(start_response, body: str):
    data = f"{body} {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
    return [data]


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/size":
        tracked = sum(gc.is_tracked(r) and gc.is_tracked(r["tags"]) for r in table)
        size = sum(sys.getsizeof(r) + sys.getsizeof(r["tags"]) for r in table)
        return _answer(start_response, f"{size} {tracked}")
    gc.collect()  # a full collection walks every tracked object: it writes into each one's header
    row = table[int(path.rsplit("/", 1)[-1] or 0) % ROWS]
    return _answer(start_response, str(row["id"]))
