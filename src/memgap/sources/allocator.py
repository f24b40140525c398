"""What memgap reads of a process to tell its allocators apart, from outside (read-only) and in this
process; memgap.allocators.detect tells them apart by what each allocator's reader declares.

- the objects the process maps executable, each with its file's identity (a file replaced on disk since
  it was mapped tells nothing), its program and its preloads (LD_PRELOAD, /etc/ld.so.preload): the ELF
  files whose symbol tables and ``.rodata`` detection reads;
- the dynamic linker's lookup order, in which the first object exporting ``malloc`` serves it;
- in this process, the object ``dladdr`` names for ``malloc``: no symbol table is read here, as their
  names would be allocated in the program memgap measures.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

from memgap.documents.allocator import AllocatorInfo, FoundAllocator
from memgap.errors import MemgapError
from memgap.sources.elf import ElfInfo, defines_symbol, forget_elf_files
from memgap.sources.procfs import Mapping, ProcReader


@dataclass
class AllocatorDetection:
    name: str                   # the allocator serving malloc: glibc, jemalloc, tcmalloc, mimalloc, musl, unknown
    library: str = ""           # path of the object that provides malloc
    how: str = ""               # how we know
    others: list[str] = field(default_factory=list)  # further allocators found (names), beside the one above
    found: list[FoundAllocator] = field(default_factory=list)  # every allocator found, the serving one first

    @property
    def beside(self) -> list[FoundAllocator]:
        """The allocators found that do not serve malloc (prefixed, bundled, or loaded but not bound)."""
        return [f for f in self.found if not f.serves_malloc]

    def info(self) -> AllocatorInfo:
        """What a snapshot keeps of it (``Snapshot.allocator``), its figures added by the snapshot."""
        return AllocatorInfo(self.name, self.library, self.how, list(self.others), list(self.found))


def allocator_label(entry: FoundAllocator) -> str:
    """"jemalloc (_rjem_) in librjem.so": one found allocator in a few words."""
    prefix = " (symbols stripped)" if entry.prefix == "?" else f" ({entry.prefix})" if entry.prefix else ""
    return f"{entry.name}{prefix} in {os.path.basename(entry.library or '?')}"


def beside_note(detection: AllocatorDetection) -> str:
    """The allocators beside the one serving malloc, whose memory memgap does not read: "" if none."""
    beside = detection.beside
    if not beside:
        return ""
    return (", ".join(allocator_label(f) for f in beside) + " beside malloc's allocator: present (its code is "
            "in that object); memory it may hold is not told apart from other anonymous memory from outside, nor "
            "shown to be any of it (`inspect --deep` reads a jemalloc beside glibc's through its mallctl where a "
            "symbol table, or the dynamic one, keeps it)")


def lookup_order(exe: str, objects: dict[str, ElfInfo], preload: list[str]) -> list[str]:
    """The objects in the order ld.so searches them for a symbol: program, preloads, DT_NEEDED breadth first.
    Objects dlopen()ed later (RTLD_LOCAL) are not in it."""
    by_name: dict[str, str] = {}
    for path, info in objects.items():
        by_name.setdefault(os.path.basename(path), path)
        if info.soname:
            by_name.setdefault(info.soname, path)
    order = [exe] if exe in objects else []
    for entry in preload:
        candidate = entry if entry in objects else by_name.get(os.path.basename(entry))
        if candidate and candidate not in order:
            order.append(candidate)
    i = 0
    while i < len(order):
        for needed in objects[order[i]].needed:
            candidate = by_name.get(needed) or by_name.get(os.path.basename(needed))
            if candidate and candidate not in order:
                order.append(candidate)
        i += 1
    return order


def malloc_role(path: str, exe: str, preload: list[str], soname: str) -> str:
    if path == exe:
        return "the program itself defines malloc (linked in statically)"
    if any(entry == path or os.path.basename(entry) in (os.path.basename(path), soname) for entry in preload):
        return "preloaded (LD_PRELOAD): exports malloc ahead of libc"
    return "the first library in the program's lookup order to export malloc"


def mapped_objects(mappings: list[Mapping], exe: str | None = None, root: str = "",
                   ) -> tuple[str, tuple[tuple[str, tuple[int, int, int, int]], ...]]:
    """The program's path (``exe``, else the first file mapped) and every object mapped executable, the
    program first, each with its file's identity (device, inode, mtime, size) under ``root`` (e.g.
    /proc/PID/root for a process in a container): those deleted or replaced on disk since they were
    mapped (an upgrade: not the code that runs) are left out."""
    inodes = {m.path: m.inode for m in mappings if m.path.startswith("/") and "x" in m.perms}
    if exe is None:
        exe = next((m.path for m in mappings if m.path.startswith("/") and m.offset == 0), "")
    live = []
    for path in dict.fromkeys([exe, *inodes]):
        try:
            st = os.stat(root + path)
        except OSError:
            continue  # deleted: it tells nothing
        if path in inodes and st.st_ino != inodes[path]:
            continue  # replaced on disk (an upgrade) since it was mapped: not the code that runs
        live.append((path, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)))
    return exe, tuple(live)


def preloaded(environ: dict[str, str], root: str = "") -> list[str]:
    """The libraries ld.so preloads into a process: its LD_PRELOAD, then /etc/ld.so.preload (under ``root``)."""
    entries = environ.get("LD_PRELOAD", "").replace(":", " ").split()
    try:
        with open(f"{root}/etc/ld.so.preload", encoding="utf-8", errors="replace") as fh:
            entries += fh.read().replace(":", " ").split()
    except OSError:
        pass
    return entries


def launch_facts(reader: ProcReader) -> tuple[str | None, list[str], str]:
    """How the process ``reader`` reads was started, as detection needs it: its program's path (None where
    unreadable), its preloaded libraries, and where its files are seen from here (``process_root``)."""
    root = process_root(reader.base)
    try:
        exe: str | None = os.readlink(f"{reader.base}/exe")
    except OSError:
        exe = None
    try:
        environ = reader.environ()
    except MemgapError:
        environ = {}
    return exe, preloaded(environ, root), root


def process_root(base: str) -> str:
    """Where a process's files are seen from here (its mount namespace: /proc/PID/root), or "" where that
    is not readable (then its paths are taken as ours)."""
    return f"{base}/root" if os.path.isdir(f"{base}/root/") else ""


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def malloc_object(mappings: list[Mapping]) -> tuple[str, bool] | None:
    """The object this process's ``malloc`` resolves to (dladdr; the maps' path of it), and whether that
    address is only the program's PLT entry for a malloc it imports (then the maps, not dladdr, say
    whose it is); None where dladdr cannot tell."""
    try:
        default = ctypes.CDLL(None)
        address = ctypes.cast(default.malloc, ctypes.c_void_p).value
        info = _DlInfo()
        if not default.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
            return None
        path = info.dli_fname.decode("utf-8", "replace")
    except (OSError, AttributeError):
        return None
    # dladdr names the main program as it was started ("python3", relative): the maps give its path
    mapped = next((m.path for m in mappings if m.start <= (address or 0) < m.end and m.path.startswith("/")), None)
    if mapped is not None:
        path = mapped
    exe = os.path.realpath("/proc/self/exe")
    if os.path.realpath(path) == exe:
        imported = defines_symbol(exe, "malloc") is False
        forget_elf_files()  # one file, once: not kept in the program
        if imported:
            return path, True  # the program's canonical PLT entry for an imported malloc
    return path, False
