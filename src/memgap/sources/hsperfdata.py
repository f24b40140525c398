"""HotSpot's performance data (the "hsperfdata" that jstat reads): parsed from its bytes.

A JVM started with -XX:+UsePerfData (the default) keeps its counters in a small shared
mapping of ``/tmp/hsperfdata_<user>/<pid>``, written in place as it runs. Layout (version 2.0,
HotSpot's perfMemory.hpp and perfData.hpp; jdk.internal.perf, sun.jvmstat.perfdata.monitor.v2_0):

- a 32-byte prologue: magic 0xcafec0c0 (always these four bytes in this order), the byte order
  of everything after it (0 big endian, 1 little endian), major and minor version, an
  "accessible" flag, the bytes used, the bytes overflowed, the time stamp of the last
  structural change (jlong), the offset of the first entry and the number of entries (jints);
- entries, one after another: entry length, name offset and vector length (jints; offsets from
  the entry's start; vector length 0 for a scalar), data type (a JNI type letter: 'J' jlong,
  'B' byte vector, which holds strings), flags, units (1 none, 2 bytes, 3 ticks, 4 events,
  5 string, 6 hertz), variability (1 constant, 2 monotonic, 3 variable), data offset (jint);
  then the NUL-terminated name and the data.

The JVM appends entries while it runs: the reader takes the entries the prologue counts, each
bounded by the bytes it says are used. Pure: bytes in, counters out; anything out of bounds is
MalformedInput.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from memgap.errors import MalformedInput

MAGIC = b"\xca\xfe\xc0\xc0"
PROLOGUE_SIZE = 32
ENTRY_HEADER_SIZE = 20
UNITS = {1: "none", 2: "bytes", 3: "ticks", 4: "events", 5: "string", 6: "hertz"}
VARIABILITY = {1: "constant", 2: "monotonic", 3: "variable"}
SOURCE = "hsperfdata"


@dataclass(frozen=True)
class PerfCounter:
    """One entry: its value (an int for a jlong, text for a byte vector), units and variability."""

    name: str
    value: int | str
    units: str
    variability: str


@dataclass
class PerfData:
    """The prologue's fields and every counter by name."""

    byte_order: str           # "little" or "big"
    version: tuple[int, int]
    accessible: bool
    used: int
    overflow: int
    counters: dict[str, PerfCounter] = field(default_factory=dict)

    def number(self, name: str) -> int | None:
        counter = self.counters.get(name)
        return counter.value if counter is not None and isinstance(counter.value, int) else None

    def text(self, name: str) -> str | None:
        counter = self.counters.get(name)
        return counter.value if counter is not None and isinstance(counter.value, str) else None


def parse_perfdata(data: bytes) -> PerfData:
    """The counters of a perf data buffer (a copy of the file or of its mapping)."""
    if len(data) < PROLOGUE_SIZE:
        raise MalformedInput(SOURCE, f"{len(data)} bytes, shorter than its {PROLOGUE_SIZE}-byte prologue")
    if data[:4] != MAGIC:
        raise MalformedInput(SOURCE, f"magic {data[:4].hex()} is not cafec0c0")
    if data[4] not in (0, 1):
        raise MalformedInput(SOURCE, f"byte order {data[4]} is neither 0 (big) nor 1 (little)")
    order = "<" if data[4] == 1 else ">"
    major, minor, accessible = data[5], data[6], data[7]
    if major != 2:
        raise MalformedInput(SOURCE, f"version {major}.{minor}: only 2.x (JDK 1.5 and later) is read")
    used, overflow, _stamp, entry_offset, count = struct.unpack_from(order + "iiqii", data, 8)
    end = min(used, len(data))
    if not PROLOGUE_SIZE <= entry_offset <= end or count < 0:
        raise MalformedInput(SOURCE, f"entries at {entry_offset} ({count} of them) outside the {end} bytes used")
    perf = PerfData("little" if order == "<" else "big", (major, minor), accessible != 0, used, overflow)
    offset = entry_offset
    for index in range(count):
        if offset + ENTRY_HEADER_SIZE > end:
            raise MalformedInput(SOURCE, f"entry {index} of {count} at {offset} runs past the {end} bytes used")
        length, counter = _entry(data, order, offset, end)
        if counter is not None:
            perf.counters[counter.name] = counter
        offset += length
    return perf


def _entry(data: bytes, order: str, offset: int, end: int) -> tuple[int, PerfCounter | None]:
    """One entry at ``offset``: its length, and its counter (None for a type this reader skips)."""
    length, name_offset, vector_length, kind, _flags, units, variability, data_offset = struct.unpack_from(
        order + "iiibbbbi", data, offset)
    if length < ENTRY_HEADER_SIZE or offset + length > end:
        raise MalformedInput(SOURCE, f"entry at {offset}: length {length} outside the {end} bytes used")
    entry = data[offset:offset + length]
    if not ENTRY_HEADER_SIZE <= name_offset < length or not name_offset < data_offset <= length:
        raise MalformedInput(SOURCE, f"entry at {offset}: name at {name_offset}, data at {data_offset}, "
                                     f"not within its {length} bytes")
    nul = entry.find(b"\0", name_offset, data_offset)
    if nul <= name_offset:
        raise MalformedInput(SOURCE, f"entry at {offset}: its name is not NUL-terminated before its data")
    name = entry[name_offset:nul].decode("ascii", "replace")
    if vector_length < 0:
        raise MalformedInput(SOURCE, f"counter {name}: vector length {vector_length}")
    value: int | str
    if kind == ord("J") and vector_length == 0:
        if data_offset + 8 > length:
            raise MalformedInput(SOURCE, f"counter {name}: its jlong runs past the entry")
        value = struct.unpack_from(order + "q", entry, data_offset)[0]
    elif kind == ord("B") and vector_length > 0:
        if data_offset + vector_length > length:
            raise MalformedInput(SOURCE, f"counter {name}: its {vector_length} bytes run past the entry")
        value = entry[data_offset:data_offset + vector_length].split(b"\0", 1)[0].decode("utf-8", "replace")
    else:
        return length, None  # HotSpot writes only jlongs and byte vectors; anything else is left out
    told = UNITS.get(units, str(units)), VARIABILITY.get(variability, str(variability))
    return length, PerfCounter(name, value, *told)
