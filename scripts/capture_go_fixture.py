"""Capture what memgap's Go reader reads of a real Go program, for the parser tests.

    python scripts/capture_go_fixture.py PROGRAM tests/fixtures/go/NAME [ARGS...]

PROGRAM is tests/programs/go_heap/main.go built (``go build -o PROGRAM main.go``). It is started,
read once by the Go reader through a ProcReader that records its reads of /proc/PID/mem, then asked
for its own figures (ReadMemStats, runtime/metrics), and read again: both reads' figures, the
first read's bytes, its own figures, its maps and the program's .go.buildinfo, .debug_abbrev and
.debug_info sections (as stored: compressed) are written to NAME. The tests replay the reads.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from memgap.runtimes import go
from memgap.runtimes.base import ProcessView
from memgap.sources.elf import read_elf, read_section
from memgap.sources.procfs import ProcReader


class Recording(ProcReader):
    """A ProcReader that keeps every read of the process's memory."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.reads: dict[int, bytes] = {}
        self.recording = True

    def read_memory(self, address: int, size: int) -> bytes | None:
        data = super().read_memory(address, size)
        if data is not None and self.recording and len(data) > len(self.reads.get(address, b"")):
            self.reads[address] = data  # the first read's bytes (at rest, a second look finds the same)
        return data

    def read_many(self, addresses: list[int], size: int) -> Sequence[bytes | None]:
        return [self.read_memory(a, size) for a in addresses]


def main() -> None:
    program, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    proc = subprocess.Popen([program, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.readline()
    reader = Recording(proc.pid)
    view = ProcessView(proc.pid, reader, reader.maps(), os.readlink(f"/proc/{proc.pid}/exe"), reader.environ())
    info = go.GoReader().detect(view)
    assert info is not None
    first = go.GoReader().read(view, info)
    reader.recording = False
    proc.stdin.write("figures\n")
    proc.stdin.flush()
    own = dict(kv.split("=", 1) for kv in proc.stdout.readline().split())
    second = go.GoReader().read(view, info)
    maps = reader.read_text("maps")
    proc.kill()
    proc.wait()
    elf = read_elf(program)
    for section, name in ((".go.buildinfo", "buildinfo.bin"), (".debug_info", "debug_info.bin"),
                          (".debug_abbrev", "debug_abbrev.bin")):
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(read_section(program, elf, section))
    with open(os.path.join(out, "capture.json"), "w") as fh:
        json.dump({"version": info.version, "goarch": "amd64", "own": own, "maps": maps,
                   "memgap": [{"in_use": h.in_use, "retained": h.retained, "released": h.released,
                               "metadata": h.metadata} for h in (first, second)],
                   "reads": {f"{a:#x}": data.hex() for a, data in sorted(reader.reads.items())}}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
