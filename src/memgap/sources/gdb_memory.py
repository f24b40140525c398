"""Memory in another process through gdb: blocks memgap allocates there (and frees before
detaching), bytes written and read without a call. A part of ``gdb_attach.GdbSession``."""
from __future__ import annotations

from typing import Any

from memgap.sources.gdb_errors import CallFailed
from memgap.sources.gdb_mi import parse_memory


class ProcessMemory:
    """What ``GdbSession`` does with the process's memory; the session keeps the blocks to free."""

    _blocks: list[int]              # malloc'ed in the process by us, freed before detaching
    _pages: list[tuple[int, int]]   # (address, size) mmap'ed by us, unmapped before detaching

    def call_int(self, expr: str, what: str | None = None) -> int:
        raise NotImplementedError

    def _command(self, command: str, what: str) -> Any:
        raise NotImplementedError

    def put_strings(self, *texts: str) -> list[int]:
        """Copy NUL-terminated strings into one block malloc'ed in the process; their addresses.

        gdb would copy a string literal argument into the process itself, with a
        malloc it never frees; this block is freed before detaching.
        """
        data = [t.encode("utf-8") + b"\0" for t in texts]
        block = self.alloc(sum(len(d) for d in data))
        self.write_memory(block, b"".join(data))
        addresses, offset = [], 0
        for d in data:
            addresses.append(block + offset)
            offset += len(d)
        return addresses

    def alloc(self, size: int) -> int:
        """A block of ``size`` bytes malloc'ed in the process (by its own malloc), freed before detaching."""
        block = self.call_int(f"(unsigned long) malloc({size})", "malloc")
        if not block:
            raise CallFailed(f"malloc({size})", "returned NULL")
        self._blocks.append(block)
        return block

    def alloc_pages(self, size: int) -> int:
        """``size`` bytes (rounded up to pages) mmap'ed in the process, unmapped before detaching.

        For an allocator whose malloc does more than hand out a block: mimalloc runs its delayed
        decommits when a malloc takes a fresh page, so a malloc of memgap's would change what
        memgap came to read. mmap and munmap are system calls: no allocator runs.
        """
        size = -(-size // 4096) * 4096
        address = self.call_int(f"(unsigned long) mmap((void *) 0, {size}, 3, 0x22, -1, 0)", "mmap")  # RW, private anon
        if address in (0, (1 << 64) - 1):  # NULL, or MAP_FAILED ((void *) -1)
            raise CallFailed(f"mmap({size})", "failed")
        self._pages.append((address, size))
        return address

    def write_memory(self, address: int, data: bytes) -> None:
        """Write ``data`` into the process at ``address`` (a block from ``alloc``): no call runs."""
        rec = self._command(f"-data-write-memory-bytes {address} {data.hex()}", "writing memory")
        if rec.cls == "error":
            raise CallFailed("writing memory", str(rec.results.get("msg", "")))

    def read_memory(self, address: int, size: int) -> bytes:
        """``size`` bytes of the process at ``address``: no call runs."""
        rec = self._command(f"-data-read-memory-bytes {address} {size}", "reading memory")
        if rec.cls == "error":
            raise CallFailed("reading memory", str(rec.results.get("msg", "")))
        return parse_memory(rec.results, size)
