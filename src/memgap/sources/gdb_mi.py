"""gdb's machine interface (MI) output, parsed: pure functions, no I/O.

One line of output is one record: a result (``12^done,value="42"``), an
asynchronous event (``*stopped,...``, ``=thread-created,...``) or a stream of
text (``~"..."``). Values are C strings, tuples ``{...}`` and lists ``[...]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memgap.errors import MalformedInput

if TYPE_CHECKING:
    from typing import TypeAlias

    # an MI value: a C string, a list ``[...]`` of values, or a tuple ``{name=value,...}`` (a list of
    # results is kept as a list of one-entry tuples)
    MiValue: TypeAlias = str | list["MiValue"] | dict[str, "MiValue"]
    MiResults: TypeAlias = dict[str, MiValue]  # a record's results, by name

_KINDS = {"^": "result", "*": "exec", "+": "status", "=": "notify", "~": "console", "@": "target", "&": "log"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "e": "\x1b"}
_RECORD = re.compile(r"(\d*)([\^*+=~@&])")


@dataclass
class MiRecord:
    """One line of gdb's MI output."""

    kind: str                 # result, exec, status, notify, console, target, log, prompt, other
    token: int | None = None
    cls: str = ""             # done, error, running, exit, stopped, ... (result and async records)
    results: MiResults = field(default_factory=dict)
    text: str = ""            # stream records, and lines that are not MI at all


def _cstring(s: str, i: int) -> tuple[str, int]:
    """A C string starting at s[i] == '"'; returns (text, index after the closing quote)."""
    if i >= len(s) or s[i] != '"':
        raise MalformedInput("gdb MI output", f"expected a string at {s[i:i + 20]!r}")
    out: list[str] = []
    i += 1
    while i < len(s):
        c = s[i]
        if c == '"':
            return "".join(out), i + 1
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            octal = re.match(r"[0-7]{1,3}", s[i + 1:i + 4])
            if octal:
                out.append(chr(int(octal.group(), 8)))
                i += 1 + len(octal.group())
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    raise MalformedInput("gdb MI output", "unterminated string")


def _value(s: str, i: int) -> tuple[MiValue, int]:
    if i < len(s) and s[i] == '"':
        return _cstring(s, i)
    if i < len(s) and s[i] == "{":
        return _results(s, i + 1, "}")
    if i < len(s) and s[i] == "[":
        items: list[MiValue] = []
        i += 1
        while i < len(s) and s[i] != "]":
            if s[i] == ",":
                i += 1
                continue
            if s[i] in '"{[':  # a list of values
                item, i = _value(s, i)
            else:              # a list of results (name=value), each kept as a one-entry dict
                eq = s.find("=", i)
                if eq < 0:
                    raise MalformedInput("gdb MI output", f"expected name=value at {s[i:i + 20]!r}")
                name = s[i:eq]
                value, i = _value(s, eq + 1)
                item = {name: value}  # one-entry results
            items.append(item)
        if i >= len(s):
            raise MalformedInput("gdb MI output", "unterminated list")
        return items, i + 1
    raise MalformedInput("gdb MI output", f"unexpected value at {s[i:i + 20]!r}")


def _results(s: str, i: int, close: str | None) -> tuple[MiResults, int]:
    out: MiResults = {}
    while i < len(s):
        if close and s[i] == close:
            return out, i + 1
        if s[i] == ",":
            i += 1
            continue
        eq = s.find("=", i)
        if eq < 0:
            raise MalformedInput("gdb MI output", f"expected name=value at {s[i:i + 20]!r}")
        name = s[i:eq]
        value, i = _value(s, eq + 1)
        out[name] = value
    if close:
        raise MalformedInput("gdb MI output", f"missing {close!r}")
    return out, i


def parse_mi_line(line: str) -> MiRecord:
    """Parse one line of gdb's MI output; text that is not MI comes back as kind "other"."""
    line = line.rstrip("\r\n")
    if line.strip() == "(gdb)":
        return MiRecord("prompt")
    m = _RECORD.match(line)
    if not m:
        return MiRecord("other", text=line)
    token = int(m.group(1)) if m.group(1) else None
    kind, rest = _KINDS[m.group(2)], line[m.end():]
    if kind in ("console", "target", "log"):
        return MiRecord(kind, token, text=_cstring(rest, 0)[0])
    cls, _, tail = rest.partition(",")
    return MiRecord(kind, token, cls, _results(tail, 0, None)[0] if tail else {})


def mi_quote(text: str) -> str:
    """``text`` as an MI C-string argument."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def parse_int(value: str) -> int:
    """An integer as gdb prints it: ``42``, ``-1``, ``0x7f...``, ``0x55... <sym>``."""
    word = value.strip().split()[0] if value.strip() else ""
    try:
        return int(word, 0)
    except ValueError:
        raise MalformedInput("gdb value", f"not an integer: {value[:40]!r}") from None


_LWP = re.compile(r"\b(?:LWP|process) (\d+)")


def parse_threads(results: MiResults) -> list[tuple[str, int]]:
    """(gdb thread id, LWP) from a ``-thread-info`` result."""
    out = []
    threads = results.get("threads", [])
    for t in threads if isinstance(threads, list) else []:
        m = _LWP.search(str(t.get("target-id", ""))) if isinstance(t, dict) else None
        if m and isinstance(t, dict):
            out.append((str(t["id"]), int(m.group(1))))
    return out


def parse_memory(results: MiResults, size: int) -> bytes:
    """The bytes of a ``-data-read-memory-bytes`` result (one contiguous block of ``size`` bytes)."""
    blocks = results.get("memory", [])
    block = blocks[0] if isinstance(blocks, list) and len(blocks) == 1 else None
    if not isinstance(block, dict):
        raise MalformedInput("gdb memory", f"expected one block, got {len(blocks) if isinstance(blocks, list) else 0}")
    try:
        data = bytes.fromhex(str(block.get("contents", "")))
    except ValueError:
        raise MalformedInput("gdb memory", "contents are not hex") from None
    if len(data) != size:
        raise MalformedInput("gdb memory", f"{len(data)} bytes read of {size}")
    return data
