"""Node's inspector, as memgap's deep route into V8 (``memgap.runtimes.v8.read_deep``): one
``Runtime.evaluate`` over its WebSocket, on loopback only.

What it changes in the process, said wherever it is used: SIGUSR1 makes Node open its inspector on
127.0.0.1:9229 (or the port its ``--inspect-port`` names), and the inspector STAYS OPEN: until the
process ends, any local user who can reach that port can run code in it. Sent only where the process
catches SIGUSR1 (/proc/PID/status SigCgt): a Node built without the inspector, or started with
``--disable-sigusr1``, would be ended by it.

The client (standard library only): the listening socket is checked to be the target's own (its
inode among the target's file descriptors, in the target's /proc/PID/net/tcp), then one HTTP GET of
/json/list, the WebSocket upgrade (its accept key checked), one masked text frame, and the reply
read up to a size cap, all under one deadline.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import struct
import time
from collections.abc import Sequence

from memgap.errors import MalformedInput, MemgapError, Unsupported

DEFAULT_PORT = 9229
REPLY_CAP = 1 << 20
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_SIGUSR1_BIT = 1 << (10 - 1)  # SigCgt: bit N-1 for signal N
EXPRESSION = ("JSON.stringify({heap: require('v8').getHeapStatistics(), "
              "spaces: require('v8').getHeapSpaceStatistics()})")


def inspect_port(cmdline: Sequence[str], environ: dict[str, str]) -> int:
    """The port Node's inspector opens on: --inspect-port, --inspect(-brk)=[host:]port, else 9229.
    A host other than loopback is refused: memgap talks to the inspector on loopback only."""
    port = DEFAULT_PORT
    for word in [*cmdline[1:], *environ.get("NODE_OPTIONS", "").split()]:
        found = re.fullmatch(r"--(?:inspect-port|debug-port|inspect|inspect-brk|inspect-wait)=(?:([^:=]+):)?(\d+)",
                             word)
        if found is None:
            continue
        host, number = found.group(1), int(found.group(2))
        if host not in (None, "127.0.0.1", "localhost"):
            raise Unsupported(f"the inspector is set to listen on {host}: memgap uses it on loopback only")
        port = number if 0 < number < 65536 else port
    return port


def catches_sigusr1(status_text: str) -> bool:
    """Whether the process catches SIGUSR1 (else the signal ends it)."""
    found = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)$", status_text, re.M)
    return found is not None and bool(int(found.group(1), 16) & _SIGUSR1_BIT)


def listening_inodes(net_tcp: str, port: int) -> set[int]:
    """Inodes of the sockets listening on 127.0.0.1:``port`` in a /proc/PID/net/tcp text."""
    out = set()
    for line in net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 10 and fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A" and fields[9].isdigit():
            out.add(int(fields[9]))
    return out


def accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())  # the WebSocket protocol's hash


def client_frame(payload: bytes, mask: bytes) -> bytes:
    """A final text frame from a client: masked, as RFC 6455 requires."""
    size = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else
                            struct.pack(">BH", 0x80 | 126, size) if size < 1 << 16 else struct.pack(">BQ", 0xFF, size))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def parse_frame(data: bytes, cap: int = REPLY_CAP) -> tuple[int, bool, bytes, int] | None:
    """(opcode, final, payload, bytes used) of the first frame in ``data``; None while incomplete.
    MalformedInput for a masked or oversized server frame."""
    if len(data) < 2:
        return None
    final, opcode, masked, size, used = bool(data[0] & 0x80), data[0] & 0x0F, data[1] & 0x80, data[1] & 0x7F, 2
    if masked:
        raise MalformedInput("inspector frame", "a server frame is never masked")
    if size >= 126:
        wide = 2 if size == 126 else 8
        if len(data) < 2 + wide:
            return None
        size, used = int.from_bytes(data[2:2 + wide], "big"), 2 + wide
    if size > cap:
        raise MalformedInput("inspector frame", f"{size} bytes, over the {cap}-byte cap")
    if len(data) < used + size:
        return None
    return opcode, final, data[used:used + size], used + size


def parse_reply(message: bytes) -> dict[str, object]:
    """The figures in Runtime.evaluate's reply (id 1): its string value, itself JSON."""
    try:
        reply = json.loads(message)
        value = reply["result"]["result"]["value"]
        figures = json.loads(value)
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedInput("inspector reply", f"no figures in it ({type(exc).__name__})") from None
    if not isinstance(figures, dict):
        raise MalformedInput("inspector reply", "its value is not an object")
    return figures


def _complete(data: bytes) -> bool:
    """Whether ``data`` holds an HTTP response's head and the body its Content-Length says (the
    inspector keeps the connection open after it)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    return bool(sep) and found is not None and len(body) >= int(found.group(1))


class Inspector:
    """One conversation with the target's own inspector on loopback, under one deadline."""

    def __init__(self, pid: int, port: int, timeout: float) -> None:
        self.pid, self.port, self.deadline = pid, port, time.monotonic() + timeout

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Unsupported(f"Node's inspector on 127.0.0.1:{self.port} did not answer in time")
        return left

    def owned(self) -> bool:
        """Whether a socket the target holds listens on 127.0.0.1:port."""
        try:
            with open(f"/proc/{self.pid}/net/tcp") as fh:
                inodes = listening_inodes(fh.read(), self.port)
            links = {os.readlink(f"/proc/{self.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{self.pid}/fd")}
        except OSError:
            return False
        return any(f"socket:[{inode}]" in links for inode in inodes)

    def wait_listening(self) -> None:
        while not self.owned():
            self.left()
            time.sleep(0.02)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.left())
        sock.settimeout(self.left())
        return sock

    def _http_get(self, path: str) -> bytes:
        with self._connect() as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while len(data) <= 1 << 16 and not _complete(data):
                sock.settimeout(self.left())
                chunk = sock.recv(1 << 14)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not re.match(rb"HTTP/1\.[01] 200 ", head):
            raise MalformedInput("inspector reply", f"GET {path}: {head[:40]!r}")
        return body

    def target_path(self) -> str:
        """The WebSocket path of the process's own target (type "node"), from /json/list."""
        try:
            targets = json.loads(self._http_get("/json/list"))
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "node")
        except (ValueError, KeyError, TypeError, StopIteration):
            raise MalformedInput("inspector reply", "no node target in /json/list") from None
        found = re.fullmatch(rf"ws://(?:127\.0\.0\.1|localhost):{self.port}(/[\w-]+)", str(url))
        if found is None:
            raise MalformedInput("inspector reply", f"an unexpected WebSocket address {str(url)[:80]!r}")
        return found.group(1)

    def evaluate(self, expression: str) -> bytes:
        """The reply to one Runtime.evaluate (id 1), as sent."""
        path, key = self.target_path(), base64.b64encode(os.urandom(16))
        with self._connect() as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\n"
                         f"Connection: Upgrade\r\nSec-WebSocket-Key: {key.decode()}\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 1 << 14:
                sock.settimeout(self.left())
                chunk = sock.recv(1 << 14)
                if not chunk:
                    break
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 101") or accept_key(key) not in head:
                raise MalformedInput("inspector reply", f"no WebSocket upgrade: {head[:40]!r}")
            request = {"id": 1, "method": "Runtime.evaluate",
                       "params": {"expression": expression, "includeCommandLineAPI": True, "returnByValue": True}}
            sock.sendall(client_frame(json.dumps(request).encode(), os.urandom(4)))
            reply = self._read_reply(sock, data)
            sock.sendall(bytes([0x88, 0x80]) + os.urandom(4))  # close, masked, no payload
            return reply

    def _read_reply(self, sock: socket.socket, data: bytes) -> bytes:
        message = b""
        while True:
            frame = parse_frame(data)
            if frame is None:
                sock.settimeout(self.left())
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise MalformedInput("inspector reply", "the connection closed before the reply")
                data += chunk
                continue
            opcode, final, payload, used = frame
            data, message = data[used:], message + payload if opcode in (0, 1) else message
            if len(message) > REPLY_CAP:
                raise MalformedInput("inspector reply", f"over the {REPLY_CAP}-byte cap")
            if opcode == 8:
                raise MalformedInput("inspector reply", "the inspector closed the connection")
            if final and opcode in (0, 1):
                try:
                    ours = json.loads(message).get("id") == 1
                except (ValueError, AttributeError):
                    ours = False
                if ours:
                    return message
                message = b""  # an event, not our reply


def evaluate_in(pid: int, status_text: str, port: int, timeout: float) -> tuple[dict[str, object], bool]:
    """The figures ``EXPRESSION`` gives in the process's main context, and whether memgap opened its
    inspector (SIGUSR1 sent) for it."""
    inspector = Inspector(pid, port, timeout)
    opened = False
    if not inspector.owned():
        if not catches_sigusr1(status_text):
            raise Unsupported(f"PID {pid} does not catch SIGUSR1 (Node without its inspector, or "
                              "--disable-sigusr1): the signal would end it; not sent")
        try:
            os.kill(pid, 10)  # SIGUSR1: Node opens its inspector
        except OSError as exc:
            raise Unsupported(f"SIGUSR1 to PID {pid}: {exc.strerror}") from None
        opened = True
        inspector.wait_listening()
    try:
        return parse_reply(inspector.evaluate(EXPRESSION)), opened
    except (OSError, MemgapError) as exc:
        if isinstance(exc, MemgapError):
            raise
        raise Unsupported(f"Node's inspector on 127.0.0.1:{port}: {exc}") from None
