"""Serve Prometheus metrics of a process, a tree or every matching process, read from outside.

  memgap serve-metrics [--port N] [--address A] [--refresh S] (PID | --tree PID | --match REGEX)

The processes are read afresh (never stopping or changing them) in a collection every
--refresh seconds (10; a scrape serves the last one at once, its age in
memgap_collection_age_seconds) or, with --refresh 0, at every scrape. SIGUSR1 starts a
collection now. A worker that exited drops out, a new worker or a new match appears.
Series carry `role` (master/worker in a tree, else the command's name), `index` (by start
time) and `allocator`, never the PID: a restarted worker would make new series.
--port 0 takes a free port; the address served is printed on stdout.
"""
from __future__ import annotations

import argparse
import re
import signal
import socket
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..errors import MemgapError, NoMatchingProcess, NoSuchProcess, UsageError
from ..metrics_export import CONTENT_TYPE
from ..metrics_scrape import Scraper, Selection, find_processes
from . import _common

DEFAULT_PORT = 9555
DEFAULT_REFRESH = 10.0  # under the common scrape interval (15 s): each scrape serves figures under ~10 s old


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=_common.pid, nargs="?", help="process ID (with --tree: the tree's root)")
    p.add_argument("--tree", action="store_true", help="the process and all its descendants (master and workers)")
    p.add_argument("--match", metavar="REGEX", help="every process whose command line matches (re.search)")
    p.add_argument("--port", type=_common.port, default=DEFAULT_PORT, metavar="N",
                   help=f"port to listen on ({DEFAULT_PORT})")
    p.add_argument("--address", default="0.0.0.0", metavar="A",
                   help="address to listen on (0.0.0.0: every interface; 127.0.0.1: this machine only)")
    p.add_argument("--refresh", type=_common.seconds_or_zero, default=DEFAULT_REFRESH, metavar="S",
                   help=f"seconds between the end of a collection and the next ({DEFAULT_REFRESH:g}); "
                        "0: read the processes at every scrape")


@dataclass(frozen=True)
class ServeMetricsRequest:
    """``memgap serve-metrics``'s options: the processes to read (PID, --tree and --match, checked
    into a Selection of memgap.metrics_scrape) and where to serve them."""

    selection: Selection
    port: int = DEFAULT_PORT
    address: str = "0.0.0.0"
    refresh: float = DEFAULT_REFRESH

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeMetricsRequest:
        return cls(selection=_selection(args.pid, args.tree, args.match), port=args.port, address=args.address,
                   refresh=args.refresh)


def _selection(pid: int | None, tree: bool, match: str | None) -> Selection:
    """The targets asked for, checked: exactly one of PID and --match."""
    if (pid is None) == (match is None):
        raise UsageError("serve-metrics: give a PID, --tree PID or --match REGEX (one of them)")
    if match is None:
        return Selection(pid=pid, tree=tree)
    if tree:
        raise UsageError("serve-metrics: --tree takes a PID, not --match")
    try:
        return Selection(match=re.compile(match))
    except re.error as exc:
        raise UsageError(f"serve-metrics: --match {match!r} is not a regular expression: {exc}") from None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a scrape in flight does not hold up Ctrl-C
    scraper: Scraper


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body, status, ctype = self.server.scraper.scrape().encode(), 200, CONTENT_TYPE
            except Exception as exc:  # noqa: BLE001 - a bug must not end the server: Prometheus sees the scrape fail
                body, status, ctype = f"memgap: scrape failed: {exc}\n".encode(), 500, "text/plain; charset=utf-8"
        elif path == "/":
            body, status, ctype = b"memgap serve-metrics: see /metrics\n", 200, "text/plain; charset=utf-8"
        else:
            body, status, ctype = b"not found: see /metrics\n", 404, "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib method's own parameter name
        pass  # one line per scrape would fill a journal; errors are logged by the scraper


def listen(address: str, port: int) -> _Server:
    """The HTTP server, bound (not yet serving); a port in use or an address not ours is a MemgapError."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server_class: type[_Server] = type("_Server", (_Server,), {"address_family": family})
    try:
        return server_class((address, port), _Handler)
    except OSError as exc:
        raise MemgapError(f"serve-metrics: cannot listen on {address}:{port}: {exc.strerror or exc}") from None


def main(args: argparse.Namespace) -> int:
    return execute(ServeMetricsRequest.from_args(args))


def execute(request: ServeMetricsRequest) -> int:
    chosen = request.selection
    if not find_processes(chosen):
        if chosen.match is not None:
            raise NoMatchingProcess(chosen.match.pattern)
        raise NoSuchProcess(chosen.pid or 0)  # no --match: a PID was given
    server = listen(request.address, request.port)
    try:
        scraper = Scraper(chosen, refresh=request.refresh)
        scraper.collect()  # a first read: what cannot be read at all is said now, not at every scrape
        if not scraper.last_processes and scraper.last_errors:
            raise scraper.last_errors[0]
        if request.refresh > 0:
            scraper.start()
            signal.signal(signal.SIGUSR1, lambda signum, frame: scraper.refresh_now())
        server.scraper = scraper
        host, port = str(server.server_address[0]), server.server_address[1]  # (host, port[, flow, scope])
        host = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
        print(f"memgap: serving http://{host}:{port}/metrics ({chosen.describe()}, "
              f"{scraper.last_processes} now)", flush=True)
        server.serve_forever()
    finally:
        server.server_close()
    return 0
