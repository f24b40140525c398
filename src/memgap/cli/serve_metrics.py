"""Serve Prometheus metrics of a process, a tree or every matching process, read from outside.

  memgap serve-metrics [--listen-address HOST:PORT] [--refresh S] (PID | --tree PID | --match REGEX)

The processes are read afresh (never stopping or changing them) in a collection every
--refresh seconds (10; a scrape serves the last one at once, its age in
memgap_collection_age_seconds) or, with --refresh 0, at every scrape. SIGUSR1 starts a
collection now. A worker that exited drops out, a new worker or a new match appears; a PID
given (or a tree's root) that exits, or whose PID another process takes, is served as gone
(memgap_target_up 0), never followed. Series carry `role` (master/worker in a tree, else the
command's name), `index` (by start time) and `allocator`, never the PID: a restarted worker
would make new series.
It listens on 127.0.0.1 unless told otherwise (the figures are about other users' processes):
TLS with --tls-cert-file/--tls-key-file, credentials from --basic-auth-file (user:password
lines) or --bearer-token-file. --port 0 takes a free port; the address served is printed.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import re
import signal
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass

from memgap.cli import _common
from memgap.errors import MemgapError, NoMatchingProcess, NoSuchProcess, UsageError
from memgap.metrics.export import CONTENT_TYPE
from memgap.metrics.scrape import Scraper, Selection, find_processes
from memgap.metrics.server import (
    READ_TIMEOUT,
    WRITE_TIMEOUT,
    Credentials,
    MetricsServer,
    Response,
    WebConfig,
    tls_context,
)
from memgap.sources.processes import ProcessIdentity

DEFAULT_PORT = 9555
DEFAULT_ADDRESS = "127.0.0.1"  # the figures are about other users' processes: this machine only unless asked
DEFAULT_REFRESH = 10.0  # under the common scrape interval (15 s): each scrape serves figures under ~10 s old


def listen_address(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (every IPv4 interface), as exporters' --web.listen-address."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (127.0.0.1:9555, [::1]:9555, :9555)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"{text!r}: an IPv6 address goes in brackets ([::1]:9555)")
    return host or "0.0.0.0", _common.port(port_text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=_common.pid, nargs="?", help="process ID (with --tree: the tree's root)")
    p.add_argument("--tree", action="store_true", help="the process and all its descendants (master and workers)")
    p.add_argument("--match", metavar="REGEX", help="every process whose command line matches (re.search)")
    p.add_argument("--listen-address", type=listen_address, metavar="HOST:PORT",
                   help=f"where to listen, as exporters' --web.listen-address ({DEFAULT_ADDRESS}:{DEFAULT_PORT}; "
                        ":PORT: every interface); or --address and --port")
    p.add_argument("--port", type=_common.port, metavar="N", help=f"port to listen on ({DEFAULT_PORT})")
    p.add_argument("--address", metavar="A",
                   help=f"address to listen on ({DEFAULT_ADDRESS}: this machine only; 0.0.0.0: every interface)")
    p.add_argument("--tls-cert-file", metavar="FILE",
                   help="serve HTTPS with this certificate (PEM; with --tls-key-file)")
    p.add_argument("--tls-key-file", metavar="FILE", help="the certificate's private key (PEM)")
    p.add_argument("--basic-auth-file", metavar="FILE",
                   help="HTTP basic auth: 'user:password' lines, in a file only its owner may read")
    p.add_argument("--bearer-token-file", metavar="FILE",
                   help="a bearer token (Authorization: Bearer ...), in a file only its owner may read")
    p.add_argument("--read-timeout", type=_common.seconds, default=READ_TIMEOUT, metavar="S",
                   help=f"seconds a client has to send its whole request, TLS handshake included ({READ_TIMEOUT:g})")
    p.add_argument("--write-timeout", type=_common.seconds, default=WRITE_TIMEOUT, metavar="S",
                   help=f"seconds a client has to read the whole answer ({WRITE_TIMEOUT:g})")
    p.add_argument("--refresh", type=_common.seconds_or_zero, default=DEFAULT_REFRESH, metavar="S",
                   help=f"seconds between the end of a collection and the next ({DEFAULT_REFRESH:g}); "
                        "0: read the processes at every scrape")


@dataclass(frozen=True)
class ServeMetricsRequest:
    """``memgap serve-metrics``'s options: the processes to read (PID, --tree and --match, checked
    into a Selection of memgap.metrics.scrape) and where and to whom to serve them."""

    selection: Selection
    port: int = DEFAULT_PORT
    address: str = DEFAULT_ADDRESS
    refresh: float = DEFAULT_REFRESH
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_file: str | None = None
    bearer_token_file: str | None = None
    read_timeout: float = READ_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise UsageError("serve-metrics: --tls-cert-file and --tls-key-file go together")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeMetricsRequest:
        if args.listen_address is not None and (args.address is not None or args.port is not None):
            raise UsageError("serve-metrics: give --listen-address, or --address and --port, not both")
        address, port = args.listen_address or (args.address or DEFAULT_ADDRESS,
                                                 DEFAULT_PORT if args.port is None else args.port)
        return cls(selection=_selection(args.pid, args.tree, args.match), port=port, address=address,
                   refresh=args.refresh, tls_cert_file=args.tls_cert_file, tls_key_file=args.tls_key_file,
                   basic_auth_file=args.basic_auth_file, bearer_token_file=args.bearer_token_file,
                   read_timeout=args.read_timeout, write_timeout=args.write_timeout)

    def web_config(self) -> WebConfig:
        """Where and how to serve, the TLS certificate and the credentials read from their files."""
        users = tuple(_users(_secret(self.basic_auth_file, "--basic-auth-file"))) if self.basic_auth_file else ()
        token = _secret(self.bearer_token_file, "--bearer-token-file").strip() if self.bearer_token_file else None
        if token == "":
            raise MemgapError(f"serve-metrics: --bearer-token-file {self.bearer_token_file} is empty")
        tls = tls_context(self.tls_cert_file, self.tls_key_file) if self.tls_cert_file and self.tls_key_file else None
        return WebConfig(host=self.address, port=self.port, tls=tls, credentials=Credentials(users, token),
                         read_timeout=self.read_timeout, write_timeout=self.write_timeout)


def _secret(path: str, flag: str) -> str:
    """A credentials file's text; refused where other users may read or write it (as ssh does)."""
    try:
        with open(path, encoding="utf-8") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if mode & 0o077:
                raise MemgapError(f"serve-metrics: {flag} {path} may be read by other users (mode "
                                  f"{stat.S_IMODE(mode):04o}): chmod 600 {path}")
            return fh.read(1 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        raise MemgapError(f"serve-metrics: cannot read {flag} {path}: {getattr(exc, 'strerror', None) or exc}") \
            from None


def _users(text: str) -> list[tuple[str, str]]:
    """'user:password' lines (blank lines and # comments left out)."""
    users = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, password = line.partition(":")
        if not colon or not user or not password:
            raise MemgapError(f"serve-metrics: --basic-auth-file line {number} is not user:password")
        users.append((user, password))
    if not users:
        raise MemgapError("serve-metrics: --basic-auth-file names no user")
    return users


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


def page(scraper: Scraper) -> Callable[[str], Response]:
    """What each path answers: /metrics the figures, / a pointer to them."""
    def serve(path: str) -> Response:
        if path == "/metrics":
            return Response(200, scraper.scrape().encode(), CONTENT_TYPE)
        if path == "/":
            return Response(200, b"memgap serve-metrics: see /metrics\n")
        return Response(404, b"not found: see /metrics\n")

    return serve


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(args: argparse.Namespace) -> int:
    return execute(ServeMetricsRequest.from_args(args))


def execute(request: ServeMetricsRequest) -> int:
    chosen = request.selection
    found = find_processes(chosen)
    if not found:
        if chosen.match is not None:
            raise NoMatchingProcess(chosen.match.pattern)
        raise NoSuchProcess(chosen.pid or 0)  # no --match: a PID was given
    config = request.web_config()
    server = MetricsServer(config, lambda path: Response(503, b"starting\n"))
    try:
        # a PID given names the process it names now: one that takes the PID later is not followed
        pinned = ProcessIdentity(found[0].pid, found[0].start) if chosen.match is None else None
        scraper = Scraper(chosen, refresh=request.refresh, pinned=pinned)
        scraper.collect()  # a first read: what cannot be read at all is said now, not at every scrape
        if not scraper.last_processes and scraper.last_errors:
            raise scraper.last_errors[0]
        if request.refresh > 0:
            scraper.start()
            signal.signal(signal.SIGUSR1, lambda signum, frame: scraper.refresh_now())
        server.page = page(scraper)
        host, port = server.address
        host = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
        scheme = "https" if config.tls is not None else "http"
        print(f"memgap: serving {scheme}://{host}:{port}/metrics ({chosen.describe()}, "
              f"{scraper.last_processes} now)", flush=True)
        if not config.credentials.required and not _loopback(config.host):
            print(f"memgap: serve-metrics: {config.host} is reachable from other machines and no credentials are asked "
                  "(--basic-auth-file, --bearer-token-file): anyone who reaches it reads these figures",
                  file=sys.stderr, flush=True)
        server.serve_forever()
    finally:
        server.close()
    return 0
