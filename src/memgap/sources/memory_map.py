"""The kernel's view of a process: every mapping with its resident pages, and
which of them are thread stacks.

Reads maps and pagemap once; everything later (allocator walks, attribution)
uses the bitmaps read here, so one snapshot sees one instant as closely as
/proc allows.
"""
from __future__ import annotations

import itertools
import resource
import struct
from dataclasses import dataclass, field

from memgap.sources.procfs import (
    PAGE_SIZE,
    Mapping,
    PageCounts,
    ProcReader,
    count_pagemap,
    exclusive_bitmap,
    present_bitmap,
)
from memgap.sources.resident_map import ResidentMap

DEFAULT_STACK = 8 << 20
TCB_PAGES = 2  # glibc puts a thread's struct pthread at the top of its stack block (2368 bytes below here)
_TCB_HEAD = struct.Struct("<3Q")  # x86-64 tcbhead_t: tcb, dtv, self


@dataclass(slots=True)
class MappedPages:
    mapping: Mapping
    counts: PageCounts

    @property
    def resident(self) -> int:
        return self.counts.present * PAGE_SIZE

    @property
    def anon_resident(self) -> int:
        """Private anonymous pages (copy-on-write copies in file mappings included)."""
        return self.counts.anon_present * PAGE_SIZE

    @property
    def file_resident(self) -> int:
        """File pages and shared memory (pagemap bit 61)."""
        return (self.counts.present - self.counts.anon_present) * PAGE_SIZE

    @property
    def anon_private(self) -> int:
        """Of ``anon_resident``, the pages no other process maps (pagemap bit 56)."""
        return self.counts.anon_exclusive * PAGE_SIZE

    @property
    def file_private(self) -> int:
        """Of ``file_resident``, the pages no other process maps (pagemap bit 56)."""
        return (self.counts.exclusive - self.counts.anon_exclusive) * PAGE_SIZE


@dataclass
class MemoryMap:
    mappings: list[MappedPages]
    resident: ResidentMap
    stacks: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, label

    @property
    def plain_mappings(self) -> list[Mapping]:
        return [m.mapping for m in self.mappings]


def _stack_limit(reader: ProcReader) -> int:
    """The default thread stack size: the target's RLIMIT_STACK soft limit."""
    try:
        for line in reader.read_text("limits").splitlines():
            if line.startswith("Max stack size"):
                word = line.split()[3]
                return int(word) if word.isdigit() else 32 << 20  # glibc's default when unlimited
    except Exception:  # noqa: BLE001 - a missing limits file is no reason to fail a snapshot
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    return soft if soft > 0 else DEFAULT_STACK


def read_memory_map(reader: ProcReader, extra_stack_addresses: tuple[int, ...] = (),
                    maps: list[Mapping] | None = None, known_tids: frozenset[int] = frozenset()) -> MemoryMap:
    """Maps plus pagemap for every mapping that can hold pages, and the thread stacks."""
    if maps is None:
        maps = reader.maps()
    resident = ResidentMap(reader)
    mapped = []
    readable = [m for m in maps if not m.is_special and m.perms[:3] != "---"]
    for group in _contiguous_file_groups(readable):
        if len(group) == 1 or not group[0].is_file or reader.pid == "self":  # its own: a piece at a time
            for m in group:
                bitmap, exclusive, counts = reader.resident_pages(m)
                resident.add(m.start, m.end, bitmap, exclusive)
                mapped.append(MappedPages(m, counts))
            continue
        # one pagemap read for a library's adjacent mappings: the read count, not the bytes, costs
        raw = reader.pagemap(group[0].start, group[-1].end)
        for m in group:
            part = raw[(m.start - group[0].start) // PAGE_SIZE * 8:(m.end - group[0].start) // PAGE_SIZE * 8]
            resident.add(m.start, m.end, present_bitmap(part), exclusive_bitmap(part))
            mapped.append(MappedPages(m, count_pagemap(part)))
    memmap = MemoryMap(mapped, resident)
    memmap.stacks = find_stacks(maps, reader, extra_stack_addresses, known_tids, resident)
    return memmap


def _contiguous_file_groups(maps: list[Mapping]) -> list[list[Mapping]]:
    """Runs of adjacent file-backed mappings; every other mapping alone."""
    groups: list[list[Mapping]] = []
    for m in maps:
        if groups and m.is_file and groups[-1][-1].is_file and groups[-1][-1].end == m.start:
            groups[-1].append(m)
        else:
            groups.append([m])
    return groups


def _guarded(maps: list[Mapping]) -> list[Mapping]:
    """Private anonymous read-write mappings directly above a PROT_NONE one: the shape
    of a glibc thread stack (its guard below it, the stack growing down towards it)."""
    return [m for below, m in itertools.pairwise(maps)
            if below.end == m.start and below.perms == "---p" and m.perms == "rw-p"
            and not below.is_file and not m.is_file and not m.path]


def _thread_control_block(reader: ProcReader, resident: ResidentMap, m: Mapping,
                          page_buffer: bytearray) -> int | None:
    """The address of the glibc struct pthread in the top pages of ``m``, or None.

    On x86-64 it starts with tcbhead_t, whose ``tcb`` and ``self`` fields (offsets 0
    and 16) both hold its own address, and ``dtv`` (8) a pointer. Only resident pages
    are read: a thread's struct pthread is written when it starts.
    """
    for page in range(m.end - PAGE_SIZE, max(m.start, m.end - TCB_PAGES * PAGE_SIZE) - 1, -PAGE_SIZE):
        if resident.resident(page, page + PAGE_SIZE) and reader.read_memory_into(page, page_buffer):
            found = _self_pointer(page_buffer, page)
            if found is not None:
                return found
    return None


def _self_pointer(data: bytearray, page: int) -> int | None:
    """The address in ``data`` (one page at ``page``) of a tcbhead_t: a word holding its own address,
    a non-null dtv, the same address again. Searched with bytes.find for the bytes every address in
    the page shares (bits 16-63): the observed process's own sampler runs this, and unpacking the
    page into 512 ints would churn the allocator it measures."""
    high = (page >> 16).to_bytes(6, "little")
    pos = data.find(high, 2)
    while pos >= 0:
        start = pos - 2  # struct pthread is aligned to 64 bytes, 16 at the least
        if start % 16 == 0 and start + 24 <= len(data):
            address = page + start
            tcb, dtv, self_ = _TCB_HEAD.unpack_from(data, start)
            if tcb == address == self_ and dtv not in (0, address):
                return address
        pos = data.find(high, pos + 1)
    return None


def find_stacks(maps: list[Mapping], reader: ProcReader, extra: tuple[int, ...],
                known_tids: frozenset[int] = frozenset(),
                resident: ResidentMap | None = None) -> list[tuple[int, int, str]]:
    """Stack ranges: [stack]; each glibc thread stack, found by the struct pthread
    at its top (whether the thread runs or sleeps); the mapping under each blocked
    thread's stack pointer; and the addresses given (in-process: each Python
    thread's pthread struct). Threads in ``known_tids`` are covered by those
    addresses and their syscall files are not read.

    A thread's /proc/PID/task/TID/syscall shows no stack pointer while the thread is
    runnable ("running"), so stack pointers alone missed the stacks of threads busy on
    a CPU. A stack found by its stack pointer is capped at the stack size measured
    from its mapping's start: the kernel may have merged an unrelated mapping above it
    (a struct pthread at the top of the mapping says nothing was merged there).
    """
    limit = _stack_limit(reader)
    try:
        pointers = reader.thread_stack_pointers(skip=known_tids)
    except Exception:  # noqa: BLE001 - syscall files need ptrace access; stacks then stay unlabelled
        pointers = {}
    found: dict[int, tuple[int, int, str]] = {}
    for m in maps:
        if m.path == "[stack]":
            found[m.start] = (m.start, m.end, "main thread stack")
    page_buffer = bytearray(PAGE_SIZE)  # one for all reads: see _self_pointer
    for m in _guarded(maps) if resident is not None else []:
        if resident is not None and _thread_control_block(reader, resident, m, page_buffer) is not None:
            found[m.start] = (m.start, m.end, "thread stack (struct pthread at its top)")
    anon = [m for m in maps if m.writable and not m.is_file and not m.path]
    for label, address in [*((f"thread {tid} stack", sp) for tid, sp in pointers.items()),
                           *(("Python thread stack", a) for a in extra)]:
        for m in anon:
            if m.start <= address < m.end and m.start not in found:
                end = min(m.end, m.start + limit)
                if address < end:
                    found[m.start] = (m.start, end, label)
                break
    return sorted(found.values())
