"""Parsers for /proc files, and thin readers for them.

Parsers take the text (or bytes) of a file and never touch the filesystem, so
they are tested on files captured from real processes. Readers take a PID and an
injectable ``proc_root`` and translate OS errors in one place.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from memgap.errors import MalformedInput, NoSuchProcess, translate_os_error
from memgap.sources import page_bits
from memgap.sources.page_bits import Bits

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# Special mappings the kernel does not count in RSS, or that belong to no one.
SPECIAL_MAPPINGS = frozenset({"[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]"})


@dataclass(slots=True)  # created by the hundred per snapshot: no frozen overhead
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    dev: str
    inode: int
    path: str

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def readable(self) -> bool:
        return self.perms[0] == "r"

    @property
    def writable(self) -> bool:
        return self.perms[1] == "w"

    @property
    def is_file(self) -> bool:
        """Backed by a file (shared memory files included), not anonymous."""
        return self.inode != 0 or (self.path.startswith("/") and not self.path.startswith("/SYSV"))

    @property
    def is_special(self) -> bool:
        return self.path in SPECIAL_MAPPINGS


# The paths the kernel gives shared memory (shmem pages: RssShmem) in maps, by kind. Each has an
# inode, so it reads as a file (is_file); its pages carry pagemap's "file page" bit like a file's.
SHARED_MEMORY_PATHS = (("/SYSV", "sysv"), ("/dev/shm/", "posix"), ("/memfd:", "memfd"),
                       ("/dev/zero (deleted)", "anonymous"), ("[anon_shmem", "anonymous"))


def shared_memory_kind(path: str) -> str | None:
    """Which shared memory a mapping's path names: SysV segments (shmget), POSIX shared memory
    (shm_open, files in /dev/shm), memfds, anonymous MAP_SHARED memory (shown as the /dev/zero it
    was set up from); None for anything else. Other tmpfs files stay files."""
    for prefix, kind in SHARED_MEMORY_PATHS:
        if path.startswith(prefix):
            return kind
    return None


@dataclass
class SmapsEntry:
    """A mapping from /proc/PID/smaps with its counters in bytes."""

    mapping: Mapping
    fields: dict[str, int] = field(default_factory=dict)
    vmflags: tuple[str, ...] = ()

    def get(self, name: str) -> int:
        return self.fields.get(name, 0)


def _parse_map_line(line: str, source: str) -> Mapping:
    parts = line.split(None, 5)
    if len(parts) < 5:
        raise MalformedInput(source, f"short mapping line {line[:80]!r}")
    try:
        start_s, _, end_s = parts[0].partition("-")
        start, end = int(start_s, 16), int(end_s, 16)
        perms = parts[1]
        offset = int(parts[2], 16)
        inode = int(parts[4])
    except ValueError as exc:
        raise MalformedInput(source, f"bad mapping line {line[:80]!r}") from exc
    if len(perms) != 4 or end < start:
        raise MalformedInput(source, f"bad mapping line {line[:80]!r}")
    path = parts[5].strip() if len(parts) > 5 else ""
    return Mapping(start, end, perms, offset, parts[3], inode, path)


def parse_maps(text: str | list[str]) -> list[Mapping]:
    """Parse /proc/PID/maps (its text, or its lines)."""
    return [_parse_map_line(line, "maps") for line in (text.splitlines() if isinstance(text, str) else text)
            if line.strip()]


def _is_map_header(line: str) -> bool:
    head = line.split(" ", 1)[0]
    return "-" in head and not head.endswith(":")


def parse_smaps(text: str) -> list[SmapsEntry]:
    """Parse /proc/PID/smaps (or smaps_rollup, which yields one entry)."""
    entries: list[SmapsEntry] = []
    current: SmapsEntry | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if _is_map_header(line):
            current = SmapsEntry(_parse_map_line(line, "smaps"))
            entries.append(current)
            continue
        if current is None:
            raise MalformedInput("smaps", f"counter before any mapping: {line[:80]!r}")
        name, _, rest = line.partition(":")
        if not _:
            raise MalformedInput("smaps", f"line without a colon: {line[:80]!r}")
        if name == "VmFlags":
            current.vmflags = tuple(rest.split())
            continue
        words = rest.split()
        if not words:
            raise MalformedInput("smaps", f"empty counter {name!r}")
        try:
            value = int(words[0])
        except ValueError as exc:
            raise MalformedInput("smaps", f"non-numeric {name}: {rest.strip()[:40]!r}") from exc
        current.fields[name] = value * 1024 if len(words) > 1 and words[1] == "kB" else value
    return entries


def parse_status(text: str) -> dict[str, int | str]:
    """Parse /proc/PID/status: sizes in bytes, counts as ints, the rest as text."""
    out: dict[str, int | str] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        rest = rest.strip()
        words = rest.split()
        if len(words) == 2 and words[1] == "kB" and words[0].isascii() and words[0].isdigit():
            out[name] = int(words[0]) * 1024
        elif rest.isascii() and rest.isdigit():  # not "²": isdigit() alone takes it, int() does not
            out[name] = int(rest)
        else:
            out[name] = rest
    if "VmRSS" not in out and "Name" not in out:
        raise MalformedInput("status", "neither Name nor VmRSS present")
    return out


def status_int(status: dict[str, int | str], name: str) -> int:
    value = status.get(name, 0)
    return value if isinstance(value, int) else 0


def parse_vmstat(text: str) -> dict[str, int]:
    """/proc/vmstat: one ``name value`` pair per line."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        try:
            found[name] = int(value)
        except ValueError:
            continue
    return found


def oom_kills(path: str = "/proc/vmstat") -> int | None:
    """Processes the kernel's OOM killer has killed since boot, machine-wide (cgroup
    OOM kills included; Linux 4.13+), or None where it is not counted."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return parse_vmstat(fh.read()).get("oom_kill")
    except OSError:
        return None


def parse_environ(data: bytes) -> dict[str, str]:
    """Parse /proc/PID/environ (NUL-separated KEY=VALUE)."""
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        if not item:
            continue
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


@dataclass(frozen=True)
class TaskStat:
    """The fields of /proc/PID/task/TID/stat memgap uses."""

    tid: int
    comm: str
    state: str
    ppid: int
    start_time: int  # clock ticks after boot: with the PID, it identifies a process
    cpu_ticks: int = 0  # user plus system time, in clock ticks


def parse_stat(text: str) -> TaskStat:
    """Parse /proc/PID/stat; the command name may hold spaces and parentheses."""
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise MalformedInput("stat", "no (comm) field")
    try:
        tid = int(text[:open_paren])
        rest = text[close_paren + 2 :].split()
        return TaskStat(tid, text[open_paren + 1 : close_paren], rest[0], int(rest[1]), int(rest[19]),
                        int(rest[11]) + int(rest[12]))
    except (ValueError, IndexError) as exc:
        raise MalformedInput("stat", f"too few fields: {text[:80]!r}") from exc


def parse_syscall_sp(text: str) -> int | None:
    """The stack pointer from /proc/PID/task/TID/syscall, or None while running."""
    words = text.split()
    if len(words) >= 8 and words[0] not in ("running",):
        try:
            return int(words[-2], 16)
        except ValueError:
            return None
    return None


# Pagemap: one little-endian u64 per page. Bit 63 present, 62 swapped,
# 61 file page or shared anonymous, 56 exclusively mapped (Linux 4.2+: the page is
# mapped by this process alone; unlike the PFN, readable without CAP_SYS_ADMIN).
_PRESENT_TABLE = bytes(1 if b & 0x80 else 0 for b in range(256))
_ANON_PRESENT_TABLE = bytes(1 if (b & 0x80) and not (b & 0x20) else 0 for b in range(256))
_SWAPPED_TABLE = bytes(1 if b & 0x40 else 0 for b in range(256))
_EXCLUSIVE_TABLE = bytes(1 if (b & 0x80) and (b & 0x01) else 0 for b in range(256))
_ANON_EXCLUSIVE_TABLE = bytes(1 if (b & 0x80) and (b & 0x01) and not (b & 0x20) else 0 for b in range(256))


@dataclass(slots=True)  # created by the hundred per snapshot: no frozen overhead
class PageCounts:
    """Pages of a range by state, from pagemap."""

    present: int = 0
    anon_present: int = 0  # present and private anonymous (bit 61 clear)
    swapped: int = 0
    exclusive: int = 0       # present and mapped by this process alone (bit 56)
    anon_exclusive: int = 0  # ...and private anonymous

    def __add__(self, other: PageCounts) -> PageCounts:
        return PageCounts(self.present + other.present, self.anon_present + other.anon_present,
                          self.swapped + other.swapped, self.exclusive + other.exclusive,
                          self.anon_exclusive + other.anon_exclusive)


def count_pagemap(data: bytes) -> PageCounts:
    """Count present, private-anonymous-present, swapped and exclusive pages in pagemap bytes."""
    if len(data) % 8:
        raise MalformedInput("pagemap", f"length {len(data)} is not a multiple of 8")
    high = data[7::8]  # the top byte of each little-endian entry holds bits 56..63
    return PageCounts(
        high.translate(_PRESENT_TABLE).count(1),
        high.translate(_ANON_PRESENT_TABLE).count(1),
        high.translate(_SWAPPED_TABLE).count(1),
        high.translate(_EXCLUSIVE_TABLE).count(1),
        high.translate(_ANON_EXCLUSIVE_TABLE).count(1),
    )


def present_bitmap(data: bytes) -> bytes:
    """One byte per page: 1 where the page is present."""
    return data[7::8].translate(_PRESENT_TABLE)


def exclusive_bitmap(data: bytes) -> bytes:
    """One byte per page: 1 where the page is present and mapped by this process alone."""
    return data[7::8].translate(_EXCLUSIVE_TABLE)


@dataclass(frozen=True, slots=True)
class MappingPss:
    """One mapping's resident, proportional and private bytes, from smaps."""

    start: int
    end: int
    rss: int
    pss: int
    private: int  # Private_Clean + Private_Dirty

    @property
    def shared_share(self) -> float:
        """What one shared resident byte of this mapping counts in its PSS (0 to 1): the
        mapping's PSS less its private bytes, over its shared bytes."""
        shared = self.rss - self.private
        return min(1.0, max(0.0, (self.pss - self.private) / shared)) if shared > 0 else 0.0


_PSS_FIELDS = {"Rss": 0, "Pss": 1, "Private_Clean": 2, "Private_Dirty": 2}


def parse_smaps_pss(text: str) -> list[MappingPss]:
    """Each mapping's Rss, Pss and private bytes from /proc/PID/smaps, in maps order.

    Leaner than parse_smaps (which keeps every counter): a snapshot reads smaps each
    time for these three figures, and a large process has thousands of lines.
    """
    out: list[MappingPss] = []
    start = end = -1
    values = [0, 0, 0]
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        if colon and " " not in name:
            slot = _PSS_FIELDS.get(name)
            if slot is not None:
                words = rest.split()
                if len(words) != 2 or words[1] != "kB" or not (words[0].isascii() and words[0].isdigit()):
                    raise MalformedInput("smaps", f"bad {name}: {rest.strip()[:40]!r}")
                values[slot] += int(words[0]) * 1024
            continue
        if not line.strip():
            continue
        m = _parse_map_line(line, "smaps")
        if start >= 0:
            out.append(MappingPss(start, end, *values))
        start, end, values = m.start, m.end, [0, 0, 0]
    if start >= 0:
        out.append(MappingPss(start, end, *values))
    return out


class ProcReader:
    """Reads one process's /proc files; OS errors become memgap errors here."""

    def __init__(self, pid: int | str = "self", proc_root: str = "/proc") -> None:
        self.pid = pid
        self.proc_root = proc_root
        self.base = f"{proc_root}/{pid}"
        self._pagemap_fd: int | None = None
        self._mem_fd: int | None = None

    @property
    def numeric_pid(self) -> int:
        return os.getpid() if self.pid == "self" else int(self.pid)

    def _fail(self, exc: OSError, what: str) -> Exception:
        return translate_os_error(exc, self.numeric_pid, what, self.proc_root)

    def read_text(self, name: str) -> str:
        try:
            with open(f"{self.base}/{name}", "rb") as fh:
                return fh.read().decode("utf-8", "surrogateescape")
        except OSError as exc:
            raise self._fail(exc, f"/proc/{self.pid}/{name}") from None

    def read_bytes(self, name: str) -> bytes:
        try:
            with open(f"{self.base}/{name}", "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise self._fail(exc, f"/proc/{self.pid}/{name}") from None

    def status(self) -> dict[str, int | str]:
        return parse_status(self.read_text("status"))

    def maps(self) -> list[Mapping]:
        return parse_maps(self._own_lines("maps") if self.pid == "self" else self.read_text("maps"))

    def _own_lines(self, name: str) -> list[str]:
        """This process's own file's lines, read ``page_bits.PIECE`` bytes at a time: a big process's maps
        (160 KB for 1,600 mappings) read whole would be a temporary glibc maps and frees (memgap.sources.page_bits)."""
        lines: list[str] = []
        try:
            with open(f"{self.base}/{name}", "rb", buffering=0) as fh:
                rest = b""
                while chunk := fh.read(page_bits.PIECE):
                    *whole, rest = (rest + chunk).split(b"\n")
                    lines += (line.decode("utf-8", "surrogateescape") for line in whole)
        except OSError as exc:
            raise self._fail(exc, f"/proc/{self.pid}/{name}") from None
        return lines + ([rest.decode("utf-8", "surrogateescape")] if rest else [])

    def smaps(self) -> list[SmapsEntry]:
        return parse_smaps(self.read_text("smaps"))

    def smaps_pss(self) -> list[MappingPss]:
        return parse_smaps_pss(self.read_text("smaps"))

    def smaps_rollup(self) -> SmapsEntry | None:
        entries = parse_smaps(self.read_text("smaps_rollup"))
        return entries[0] if entries else None

    def environ(self) -> dict[str, str]:
        return parse_environ(self.read_bytes("environ"))

    def stat(self) -> TaskStat:
        return parse_stat(self.read_text("stat"))

    def cmdline(self) -> list[str]:
        raw = self.read_bytes("cmdline")
        return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]

    def run_delay(self) -> float:
        """Seconds its threads have waited on a run queue, ready to run (the second field of each
        task's schedstat, in ns); 0.0 where the kernel keeps none. Threads that exited are not counted."""
        waited = 0
        try:
            tasks = os.listdir(f"{self.base}/task")
        except OSError:
            return 0.0
        for tid in tasks:
            try:
                with open(f"{self.base}/task/{tid}/schedstat", "rb") as fh:
                    waited += int(fh.read().split()[1])
            except (OSError, ValueError, IndexError):
                continue
        return waited / 1e9

    def task_ids(self) -> list[int]:
        try:
            return sorted(int(t) for t in os.listdir(f"{self.base}/task") if t.isdigit())
        except OSError as exc:
            raise self._fail(exc, f"/proc/{self.pid}/task") from None

    def thread_stack_pointers(self, skip: frozenset[int] = frozenset()) -> dict[int, int]:
        """TID -> stack pointer for threads blocked in a system call (but those in ``skip``).

        A running thread has none (the kernel prints "running"); a thread that
        exits between listing and reading is skipped.
        """
        out: dict[int, int] = {}
        for tid in self.task_ids():
            if tid in skip:
                continue
            try:
                with open(f"{self.base}/task/{tid}/syscall") as fh:
                    sp = parse_syscall_sp(fh.read())
            except OSError:
                continue
            if sp is not None:
                out[tid] = sp
        return out

    def children_pids(self) -> list[int]:
        """Direct children, from every thread's children file."""
        kids: set[int] = set()
        for tid in self.task_ids():
            try:
                with open(f"{self.base}/task/{tid}/children") as fh:
                    kids.update(int(w) for w in fh.read().split())
            except OSError:
                continue
        return sorted(kids)

    def _open(self, name: str) -> int:
        try:
            return os.open(f"{self.base}/{name}", os.O_RDONLY)
        except OSError as exc:
            raise self._fail(exc, f"/proc/{self.pid}/{name}") from None

    def pagemap(self, start: int, end: int) -> bytes:
        """Raw pagemap entries for the pages of [start, end)."""
        if self._pagemap_fd is None:
            self._pagemap_fd = self._open("pagemap")
        first, last = start // PAGE_SIZE, (end + PAGE_SIZE - 1) // PAGE_SIZE
        want = (last - first) * 8
        try:
            data = os.pread(self._pagemap_fd, want, first * 8)
        except OSError as exc:
            raise self._fail(exc, f"/proc/{self.pid}/pagemap") from None
        if len(data) != want:
            # The kernel reads no pagemap of a process whose memory is gone: one that exited while
            # memgap read it (`memgap top` on a process that ends between refreshes said "malformed
            # pagemap" with exit code 6). Its maps are empty then, or its /proc entry gone.
            if not self.read_text("maps").strip():
                raise NoSuchProcess(self.numeric_pid, f"it exited while memgap read /proc/{self.pid}/pagemap")
            raise MalformedInput("pagemap", f"short read: {len(data)} of {want} bytes")
        return data

    def resident_pages(self, mapping: Mapping) -> tuple[Bits, Bits | None, PageCounts]:
        """One byte per page of ``mapping`` (1 = present), one per page for exclusive pages
        (1 = present and mapped by this process alone; None where not read), and its counts.

        In this process, private anonymous mappings use mincore(2), which tells residency
        only; everything else (and every mapping of another process) uses pagemap, which
        also tells file pages from private copies, and exclusive pages from shared ones.
        In this process both are read a piece at a time (memgap.sources.page_bits).
        """
        if self.pid == "self":
            return self._own_resident_pages(mapping)
        raw = self.pagemap(mapping.start, mapping.end)
        return present_bitmap(raw), exclusive_bitmap(raw), count_pagemap(raw)

    def _own_resident_pages(self, mapping: Mapping) -> tuple[Bits, Bits | None, PageCounts]:
        if not mapping.is_file and mapping.perms[3] == "p":
            bitmap = page_bits.mincore_bits(mapping.start, mapping.end)
            if bitmap is not None:
                resident = bitmap.count(1)
                return bitmap, None, PageCounts(resident, resident, 0)
        pages = (mapping.end - mapping.start) // PAGE_SIZE
        present, exclusive, counts = page_bits.new_bits(pages), page_bits.new_bits(pages), PageCounts()
        step = page_bits.PIECE // 8  # pagemap entries of a piece
        for at in range(0, pages, step):
            n = min(step, pages - at)
            raw = self.pagemap(mapping.start + at * PAGE_SIZE, mapping.start + (at + n) * PAGE_SIZE)
            present[at:at + n], exclusive[at:at + n] = present_bitmap(raw), exclusive_bitmap(raw)
            counts += count_pagemap(raw)
        return page_bits.done(present), page_bits.done(exclusive), counts

    def read_memory(self, address: int, size: int) -> bytes | None:
        """Bytes of the process's memory, or None where unmapped (no fault, no crash)."""
        if self._mem_fd is None:
            self._mem_fd = self._open("mem")
        try:
            data = os.pread(self._mem_fd, size, address)
        except OSError:
            return None
        return data if len(data) == size else None

    def read_many(self, addresses: list[int], size: int) -> Sequence[bytes | None]:
        """``size`` bytes at each address, None where unmapped: read_memory's answers, without
        its call per address where every read succeeds (the census reads 33,000 headers)."""
        if self._mem_fd is None:
            self._mem_fd = self._open("mem")
        fd, pread = self._mem_fd, os.pread
        try:
            data = [pread(fd, size, a) for a in addresses]
        except OSError:  # one unmapped: each on its own
            return [self.read_memory(a, size) for a in addresses]
        if sum(map(len, data)) != size * len(data):  # a short read: that one is None
            return [d if len(d) == size else None for d in data]
        return data

    def read_memory_into(self, address: int, buffer: bytearray | memoryview) -> bool:
        """Fill ``buffer`` from the process's memory; False where unmapped. A buffer reused across
        reads keeps an in-process sampler from allocating one per read in the heap it measures."""
        if self._mem_fd is None:
            self._mem_fd = self._open("mem")
        try:
            return os.preadv(self._mem_fd, [buffer], address) == len(buffer)
        except OSError:
            return False

    def close(self) -> None:
        for fd in (self._pagemap_fd, self._mem_fd):
            if fd is not None:
                os.close(fd)
        self._pagemap_fd = self._mem_fd = None

    def __enter__(self) -> ProcReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The interpreter or libpython by its file's name: python3.11, libpython3.12.so.1.0. Not "python" anywhere in
# a name: memgap's own agent, built as a Python extension (_memgap_agent.cpython-311-x86_64-linux-gnu.so), is
# preloaded into every program under `memgap run`, and made a C program read as Python.
_PYTHON_FILE = re.compile(r"^(lib)?python\d+(\.\d+)?")


def is_python(maps: list[Mapping]) -> bool:
    """A CPython process: the interpreter or libpython among its mapped files."""
    return any(m.is_file and _PYTHON_FILE.match(os.path.basename(m.path)) is not None for m in maps)
