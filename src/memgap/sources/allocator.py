"""Which allocators a process carries, where each lives, and which one serves ``malloc``.

From outside (read-only), from the ELF symbol tables of the program and of each
object mapped executable in /proc/PID/maps:

1. ``malloc`` is served by the first object in the dynamic linker's lookup order
   that exports it: the program, then preloaded libraries (LD_PRELOAD in its
   environment, /etc/ld.so.preload), then its DT_NEEDED tree breadth first. A
   program without a dynamic section is static and serves its own.
2. Each object's allocator families are told by their API, under any prefix:
   jemalloc's ``mallctl``/``mallocx``... (``je_`` in Redis, ``_rjem_`` from the
   tikv-jemallocator crate, ``je_arrow_`` in Arrow), tcmalloc's ``tc_malloc`` and
   ``MallocExtension``, mimalloc's ``mi_*``; glibc by ``gnu_get_libc_version``;
   musl by its path. A prefixed allocator sits beside whichever serves malloc.
3. A stripped program that exports no allocator API (jemalloc linked in
   statically) is told by the allocator's own messages in its ``.rodata``
   ("<jemalloc>: ..."): the ``how`` says so.

In-process, ``dladdr`` on ``malloc`` names the serving object exactly, and the
mapped libraries' names the others: symbol tables are read from outside only, as
their names would be allocated in the program memgap measures.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
from dataclasses import dataclass, field, replace

from memgap.documents.allocator import AllocatorInfo, FoundAllocator
from memgap.errors import MalformedInput, MemgapError
from memgap.sources.elf import ElfInfo, defines_symbol, forget_elf_files, read_elf, read_section
from memgap.sources.procfs import Mapping, ProcReader

# basename prefix -> allocator: the answer when the objects' symbols cannot be read
_LIBRARIES = (
    ("libjemalloc", "jemalloc"),
    ("libtcmalloc", "tcmalloc"),
    ("libmimalloc", "mimalloc"),
    ("ld-musl", "musl"),
    ("libc.musl", "musl"),
)

# Each family's API (its unprefixed names): two of them under one prefix tell the family.
# mallctl alone could be a user's wrapper; two distinct entry points are the allocator's own.
_APIS = {
    "jemalloc": ("mallctl", "mallctlnametomib", "mallctlbymib", "malloc_stats_print", "mallocx", "rallocx",
                 "xallocx", "sallocx", "sdallocx", "nallocx"),
    "tcmalloc": ("tc_malloc", "tc_free", "tc_realloc", "tc_memalign", "tc_malloc_size", "tc_version"),
    "mimalloc": ("mi_malloc", "mi_free", "mi_realloc", "mi_stats_print", "mi_collect", "mi_heap_new",
                 "mi_malloc_aligned", "mi_zalloc_aligned", "mi_realloc_aligned", "mi_version"),
}
_ANY_API = re.compile("(?:" + "|".join(api for apis in _APIS.values() for api in apis) + r")\Z|\AMallocExtension_")
# Messages only the allocator itself prints (its .rodata), for programs stripped of its symbols.
_MARKERS = {
    "jemalloc": (b"<jemalloc>: ",),
    "tcmalloc": (b"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", b"tcmalloc/tcmalloc.cc"),
    "mimalloc": (b"mimalloc: ",),
    "glibc": (b"malloc(): corrupted top size",),
}


@dataclass
class AllocatorDetection:
    name: str                   # the allocator serving malloc: glibc, jemalloc, tcmalloc, mimalloc, musl, unknown
    library: str = ""           # path of the object that provides malloc
    how: str = ""               # how we know
    others: list[str] = field(default_factory=list)  # further allocators found (names), beside the one above
    found: list[FoundAllocator] = field(default_factory=list)  # every allocator found, the serving one first

    @property
    def is_glibc(self) -> bool:
        return self.name == "glibc"

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
    return (", ".join(allocator_label(f) for f in beside) + " beside malloc's allocator: "
            + ("their" if len(beside) > 1 else "its") + " memory is counted under other anonymous "
            "from outside (`inspect --deep` reads a jemalloc beside glibc's through its mallctl where a symbol "
            "table, or the dynamic one, keeps it)")


def library_kind(path: str) -> str | None:
    if "musl" in path:  # musl's libc is named libc.so too (/usr/lib/x86_64-linux-musl/libc.so)
        return "musl"
    base = os.path.basename(path)
    for prefix, kind in _LIBRARIES:
        if base.startswith(prefix):
            return kind
    if base.startswith(("libc.so", "libc-2.")):
        return "glibc"
    return None


def families(info: ElfInfo) -> list[tuple[str, str, list[str]]]:
    """(family, prefix, its symbols seen) for each allocator API an object defines, unprefixed first."""
    return _families(info.defined)


@functools.lru_cache(maxsize=2048)  # per symbol set (its hash is kept): top asks every refresh
def _families(defined: frozenset[str]) -> list[tuple[str, str, list[str]]]:
    found: dict[tuple[str, str], list[str]] = {}
    # one C-level search per symbol first: python3 defines 10,000, of which a handful end in an API name
    for name in filter(_ANY_API.search, defined):
        for family, apis in _APIS.items():
            for api in apis:
                if name.endswith(api):
                    found.setdefault((family, name[:-len(api)]), []).append(name)
        if name.startswith("MallocExtension_"):  # gperftools' C API
            found.setdefault(("tcmalloc", ""), []).append(name)
    out = [(family, prefix, sorted(names)) for (family, prefix), names in found.items() if len(names) >= 2]
    if "gnu_get_libc_version" in defined:
        out.append(("glibc", "", ["gnu_get_libc_version"]))
    return sorted(out, key=lambda f: (f[1] != "", f[0] == "glibc", f[1], f[0]))


def marker_families(rodata: bytes) -> list[str]:
    """The allocators whose own messages appear in ``rodata``, non-glibc ones first."""
    return [family for family, needles in _MARKERS.items() if any(n in rodata for n in needles)]


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


def _role(path: str, exe: str, preload: list[str], soname: str) -> str:
    if path == exe:
        return "the program itself defines malloc (linked in statically)"
    if any(entry == path or os.path.basename(entry) in (os.path.basename(path), soname) for entry in preload):
        return "preloaded (LD_PRELOAD): exports malloc ahead of libc"
    return "the first library in the program's lookup order to export malloc"


def classify(exe: str, objects: dict[str, ElfInfo], preload: list[str],
             markers: dict[str, list[str]]) -> AllocatorDetection | None:
    """Every allocator in the objects, and the one serving malloc; None when the program's ELF is unknown.

    ``markers`` holds, for objects whose symbols name no allocator, the allocators whose own
    messages their ``.rodata`` carries (``marker_families``): the fallback for stripped files.
    """
    if exe not in objects:
        return None
    if not objects[exe].dynamic:
        server: str | None = exe
        role = "a static program: its own malloc serves it"
    else:
        server = next((p for p in lookup_order(exe, objects, preload) if "malloc" in objects[p].exported), None)
        role = _role(server, exe, preload, objects[server].soname) if server else ""
    serving: FoundAllocator | None = None
    found: list[FoundAllocator] = []
    for path, info in objects.items():
        kinds = families(info)
        if path == server and kinds and kinds[0][1] == "":
            family, _prefix, names = kinds[0]
            serving = FoundAllocator(family, path, "", f"{role}; defines " + ", ".join(names[:3]), True,
                                     any(n in info.exported for n in names))
            kinds = kinds[1:]
        elif path == server:
            marked = next(iter(markers.get(path, [])), None)
            if marked is not None:
                serving = FoundAllocator(marked, path, "", f"{role}; {_by_messages(info, marked)}", True)
        for family, prefix, names in kinds:
            if family != "glibc":  # libc is in every process; its malloc counts only where it serves
                found.append(FoundAllocator(family, path, prefix, "defines " + ", ".join(names[:3]), False,
                                            any(n in info.exported for n in names)))
        if path != server and not kinds:
            for family in markers.get(path, []):
                if family != "glibc":
                    found.append(FoundAllocator(family, path, "?", _by_messages(info, family)))
    if serving is None and server is not None:
        kind = library_kind(server) or "unknown"
        serving = FoundAllocator(kind, server, "", f"{role}; "
                                 + ("its name says which" if kind != "unknown" else "no known allocator's API in it"),
                                 True)
    if serving is None:
        return None
    others = list(dict.fromkeys(f.name for f in found if f.name != serving.name or f.prefix))
    return AllocatorDetection(serving.name, serving.library, serving.how, others, [serving, *found])


def _by_messages(info: ElfInfo, family: str) -> str:
    return (f"no allocator API among its symbols{'' if info.has_symtab else ' (stripped)'}, but {family}'s own "
            "messages are in its .rodata")


def detect_from_maps(mappings: list[Mapping], exe: str | None = None, preload: list[str] | None = None,
                     root: str = "") -> AllocatorDetection:
    """Every allocator in a process, from its maps and the ELF files they name (read under ``root``,
    e.g. /proc/PID/root for a process in a container). ``exe`` is the program's path (else the first
    file mapped), ``preload`` its LD_PRELOAD entries. Without readable ELF files, the libraries'
    names decide, as they did before memgap read symbols."""
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
    detection = _classified(root, exe, tuple(preload or ()), tuple(live))
    if detection is None:
        return detect_from_names(mappings)
    # a copy: the cached one is shared by every process with these objects mapped
    return replace(detection, others=list(detection.others), found=list(detection.found))


# classify() per set of objects named, each with its file's identity (a file changed on disk is
# read again): the same for every process of a tree of workers, and for every refresh of `top`
# (a worker's 30 objects' symbol sets cost about 3 ms to look through). Not keyed by ``root``:
# /proc/PID/root differs per process, and the identities already tell one file from another.
_CLASSIFIED: dict[tuple[str, tuple[str, ...], tuple[tuple[str, tuple[int, int, int, int]], ...]],
                  AllocatorDetection | None] = {}


def _classified(root: str, exe: str, preload: tuple[str, ...],
                live: tuple[tuple[str, tuple[int, int, int, int]], ...]) -> AllocatorDetection | None:
    """classify() over the objects named in ``live`` (read under ``root``), once per identity."""
    key = (exe, preload, live)
    if key not in _CLASSIFIED:
        if len(_CLASSIFIED) >= 256:
            _CLASSIFIED.clear()  # a long `top` over changing programs: start again rather than grow
        _CLASSIFIED[key] = _classify_files(root, exe, preload, live)
    return _CLASSIFIED[key]


def _classify_files(root: str, exe: str, preload: tuple[str, ...],
                    live: tuple[tuple[str, tuple[int, int, int, int]], ...]) -> AllocatorDetection | None:
    objects: dict[str, ElfInfo] = {}
    markers: dict[str, list[str]] = {}
    for path, _identity in live:
        try:
            objects[path] = info = read_elf(root + path)
            if not families(info):  # the fallback reads .rodata only where the symbols leave it open
                markers[path] = _markers(root + path)
        except (OSError, MalformedInput):
            continue  # unreadable, or not ELF: it tells nothing
    return classify(exe, objects, list(preload), markers)


def _markers(path: str) -> list[str]:
    st = os.stat(path)
    return _markers_cached(path, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=2048)
def _markers_cached(path: str, _identity: tuple[int, int, int, int]) -> list[str]:
    return marker_families(read_section(path, read_elf(path), ".rodata"))


def detect_from_names(mappings: list[Mapping]) -> AllocatorDetection:
    """Guess the allocator from mapped libraries' names: a non-glibc allocator wins over libc."""
    seen: dict[str, str] = {}
    for m in mappings:
        if m.path.startswith("/"):
            kind = library_kind(m.path)
            if kind and kind not in seen:
                seen[kind] = m.path
    for kind in ("jemalloc", "tcmalloc", "mimalloc", "musl"):
        if kind in seen:
            others = [k for k in seen if k not in (kind, "glibc")]
            how = "library mapped in the process (told by its file name; symbols not read)"
            return AllocatorDetection(kind, seen[kind], how, others,
                                      [FoundAllocator(kind, seen[kind], "", how, True)])
    if "glibc" in seen:
        how = "libc.so mapped and no other allocator library (told by file names; symbols not read)"
        return AllocatorDetection("glibc", seen["glibc"], how, [], [FoundAllocator("glibc", seen["glibc"], "", how,
                                                                                    True)])
    return AllocatorDetection("unknown", "", "no known allocator library mapped, and no symbols read")


def preloaded(environ: dict[str, str], root: str = "") -> list[str]:
    """The libraries ld.so preloads into a process: its LD_PRELOAD, then /etc/ld.so.preload (under ``root``)."""
    entries = environ.get("LD_PRELOAD", "").replace(":", " ").split()
    try:
        with open(f"{root}/etc/ld.so.preload", encoding="utf-8", errors="replace") as fh:
            entries += fh.read().replace(":", " ").split()
    except OSError:
        pass
    return entries


def detect_pid(reader: ProcReader, mappings: list[Mapping]) -> AllocatorDetection:
    """Every allocator in the process ``reader`` reads, from outside: its program, preloads and maps."""
    root = process_root(reader.base)
    try:
        exe: str | None = os.readlink(f"{reader.base}/exe")
    except OSError:
        exe = None
    try:
        environ = reader.environ()
    except MemgapError:
        environ = {}
    return detect_from_maps(mappings, exe, preloaded(environ, root), root)


def process_root(base: str) -> str:
    """Where a process's files are seen from here (its mount namespace: /proc/PID/root), or "" where that
    is not readable (then its paths are taken as ours)."""
    return f"{base}/root" if os.path.isdir(f"{base}/root/") else ""


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_detected: dict[int, AllocatorDetection] = {}


def detect_in_process(mappings: list[Mapping]) -> AllocatorDetection:
    """Which library this process's ``malloc`` symbol comes from (asked once per process:
    the symbol cannot be rebound after start-up), with every other allocator found."""
    pid = os.getpid()
    if pid not in _detected:
        _detected.clear()
        _detected[pid] = _detect_in_process(mappings)
    return _detected[pid]


def _detect_in_process(mappings: list[Mapping]) -> AllocatorDetection:
    # No symbol tables read here: their names would be allocated in the program memgap measures
    # (and shift its layers); the mapped libraries' names stand for the allocators beside malloc's.
    from_names = detect_from_names(mappings)
    try:
        default = ctypes.CDLL(None)
        address = ctypes.cast(default.malloc, ctypes.c_void_p).value
        info = _DlInfo()
        if not default.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
            return from_names
        path = info.dli_fname.decode("utf-8", "replace")
    except (OSError, AttributeError):
        return from_names
    # dladdr names the main program as it was started ("python3", relative): the maps give its path
    mapped = next((m.path for m in mappings if m.start <= (address or 0) < m.end and m.path.startswith("/")), None)
    if mapped is not None:
        path = mapped
    exe = os.path.realpath("/proc/self/exe")
    if os.path.realpath(path) == exe:
        imported = defines_symbol(exe, "malloc") is False
        forget_elf_files()  # one file, once: not kept in the program
        if imported:
            # the program's canonical PLT entry for an imported malloc: the maps say whose it is
            how = f"{from_names.how} (malloc's address is the program's PLT entry: imported)"
            return replace(from_names, how=how, found=[replace(f, how=how) if f.serves_malloc else f
                                                       for f in from_names.found])
    kind = library_kind(path)
    how = "malloc resolves to this library (dladdr)"
    if kind is None:
        kind = "unknown"
        how = f"malloc is defined in {path}" + (" (the program itself)" if os.path.realpath(path) == exe else "")
    others = [k for k in [from_names.name, *from_names.others] if k not in (kind, "glibc", "unknown")]
    found = [FoundAllocator(kind, path, "", how, True),
             *(FoundAllocator(f.name, f.library, f.prefix, "library mapped in the process")
               for f in from_names.found if f.name in others)]
    return AllocatorDetection(kind, path, how, others, found)
