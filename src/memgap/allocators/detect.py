"""Which allocators a process carries, where each lives, and which one serves ``malloc``: told apart by
what each allocator's reader declares (its ``signs``: memgap.allocators.base.AllocatorSigns), over what
memgap.sources.allocator reads of the process. No allocator is named here: the registry's readers are
asked, in its order.

From outside (read-only), from the ELF symbol tables of the program and of each object mapped
executable in /proc/PID/maps:

1. ``malloc`` is served by the first object in the dynamic linker's lookup order that exports it: the
   program, then preloaded libraries (LD_PRELOAD in its environment, /etc/ld.so.preload), then its
   DT_NEEDED tree breadth first. A program without a dynamic section is static and serves its own.
2. Each object's allocator families are told by their API (a reader's ``api``: two of its entry points
   under one prefix, as jemalloc's ``je_`` in Redis, ``_rjem_`` from the tikv-jemallocator crate,
   ``je_arrow_`` in Arrow; or names beginning as its ``api_starts``), or by one ``own_symbol`` (the C
   library's). A prefixed allocator sits beside whichever serves malloc.
3. A stripped program that exports no allocator API (jemalloc linked in statically) is told by the
   allocator's own messages in its ``.rodata`` (``markers``): the ``how`` says so.

Where no symbol table is read (in this process, or no ELF file readable), the mapped libraries' file
names (``libraries``, ``path_word``) decide; in this process ``dladdr`` on ``malloc`` names the serving
object exactly.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import replace

from memgap.allocators.base import AllocatorSigns
from memgap.allocators.registry import all_readers
from memgap.documents.allocator import FoundAllocator
from memgap.errors import MalformedInput
from memgap.sources import elf_ahead
from memgap.sources.allocator import (
    AllocatorDetection,
    launch_facts,
    lookup_order,
    malloc_object,
    malloc_role,
    mapped_objects,
)
from memgap.sources.elf import ElfInfo, SymbolQuery, read_elf
from memgap.sources.procfs import Mapping, ProcReader


class Signs:
    """Every reader's signs, in the registry's order, and what the search needs made once of them."""

    def __init__(self, declared: dict[str, AllocatorSigns]) -> None:
        self.declared = declared
        # the C library every process maps last where an order decides: another allocator is what tells
        self.ordered = sorted(declared.items(), key=lambda item: item[1].everywhere)
        apis = "|".join(api for s in declared.values() for api in s.api)
        starts = "".join(r"|\A" + re.escape(start) for s in declared.values() for start in s.api_starts)
        # one C-level search per symbol first: a handful of those read end in an API name
        self.any_api = re.compile(f"(?:{apis})\\Z{starts}")
        # what of an ELF file can name an allocator, or is looked up in it (malloc in the lookup order, the
        # functions --deep calls): the only symbols read of it, with the allocators' messages in .rodata
        self.query = SymbolQuery(
            names=frozenset({"malloc", *(s.own_symbol for s in declared.values() if s.own_symbol),
                             *(call for s in declared.values() for call in s.gdb_calls)}),
            endings=tuple(api for s in declared.values() for api in s.api),
            beginnings=tuple(start for s in declared.values() for start in s.api_starts),
            rodata=tuple(marker for s in declared.values() for marker in s.markers))

    def everywhere(self, name: str) -> bool:
        signs = self.declared.get(name)
        return signs is not None and signs.everywhere


@functools.cache
def signs() -> Signs:
    """The registry's readers' signs (every reader loaded, once)."""
    return Signs({name: r.signs for name, r in all_readers().items() if r.signs is not None})


def library_kind(path: str) -> str | None:
    """The allocator an object's path names (a word in it, or its file name's beginning), or None."""
    known = signs()
    for name, s in known.ordered:
        if s.path_word and s.path_word in path:
            return name
    base = os.path.basename(path)
    return next((name for name, s in known.ordered if s.libraries and base.startswith(s.libraries)), None)


def families(info: ElfInfo) -> list[tuple[str, str, list[str]]]:
    """(family, prefix, its symbols seen) for each allocator API an object defines, unprefixed first."""
    return _families(info.defined)


@functools.lru_cache(maxsize=2048)  # per symbol set: top asks every refresh
def _families(defined: frozenset[str]) -> list[tuple[str, str, list[str]]]:
    known = signs()
    found: dict[tuple[str, str], list[str]] = {}
    for symbol in filter(known.any_api.search, defined):
        for name, s in known.declared.items():
            for api in s.api:
                if symbol.endswith(api):
                    found.setdefault((name, symbol[:-len(api)]), []).append(symbol)
            if s.api_starts and symbol.startswith(s.api_starts):
                found.setdefault((name, ""), []).append(symbol)
    # mallctl alone could be a user's wrapper; two distinct entry points are the allocator's own
    out = [(name, prefix, sorted(symbols)) for (name, prefix), symbols in found.items() if len(symbols) >= 2]
    out += [(name, "", [s.own_symbol]) for name, s in known.declared.items()
            if s.own_symbol and s.own_symbol in defined]
    return sorted(out, key=lambda f: (f[1] != "", known.everywhere(f[0]), f[1], f[0]))


def marker_families(info: ElfInfo) -> list[str]:
    """The allocators whose own messages appear in the object's ``.rodata`` (read with ``signs().query``),
    the C library's last."""
    return [name for name, s in signs().ordered if any(marker in info.rodata_has for marker in s.markers)]


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
        role = malloc_role(server, exe, preload, objects[server].soname) if server else ""
    known = signs()
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
            if not known.everywhere(family):  # libc is in every process; its malloc counts only where it serves
                found.append(FoundAllocator(family, path, prefix, "defines " + ", ".join(names[:3]), False,
                                            any(n in info.exported for n in names)))
        if path != server and not kinds:
            found += [FoundAllocator(family, path, "?", _by_messages(info, family))
                      for family in markers.get(path, []) if not known.everywhere(family)]
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
    program, live = mapped_objects(mappings, exe, root)
    detection = _classified(root, program, tuple(preload or ()), live)
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
    query = signs().query
    elf_ahead.read_ahead([root + path for path, _identity in live], query)  # a first look: on several cores
    for path, _identity in live:
        try:
            objects[path] = info = read_elf(root + path, query)
        except (OSError, MalformedInput):
            continue  # unreadable, or not ELF: it tells nothing
        if not families(info):  # the messages in .rodata count only where the symbols leave it open
            markers[path] = marker_families(info)
    return classify(exe, objects, list(preload), markers)


def detect_from_names(mappings: list[Mapping]) -> AllocatorDetection:
    """Guess the allocator from mapped libraries' names: another allocator's wins over the C library's."""
    known = signs()
    seen: dict[str, str] = {}
    for m in mappings:
        if m.path.startswith("/"):
            kind = library_kind(m.path)
            if kind and kind not in seen:
                seen[kind] = m.path
    for kind, s in known.ordered:
        if kind not in seen:
            continue
        if s.everywhere:
            how = (f"{s.libraries[0] if s.libraries else kind} mapped and no other allocator library (told by file "
                   "names; symbols not read)")
            return AllocatorDetection(kind, seen[kind], how, [], [FoundAllocator(kind, seen[kind], "", how, True)])
        others = [k for k in seen if k != kind and not known.everywhere(k)]
        how = "library mapped in the process (told by its file name; symbols not read)"
        return AllocatorDetection(kind, seen[kind], how, others, [FoundAllocator(kind, seen[kind], "", how, True)])
    return AllocatorDetection("unknown", "", "no known allocator library mapped, and no symbols read")


def detect_pid(reader: ProcReader, mappings: list[Mapping]) -> AllocatorDetection:
    """Every allocator in the process ``reader`` reads, from outside: its program, preloads and maps."""
    exe, preload, root = launch_facts(reader)
    return detect_from_maps(mappings, exe, preload, root)


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
    resolved = malloc_object(mappings)
    if resolved is None:
        return from_names
    path, imported = resolved
    if imported:
        # the program's canonical PLT entry for an imported malloc: the maps say whose it is
        how = f"{from_names.how} (malloc's address is the program's PLT entry: imported)"
        return replace(from_names, how=how, found=[replace(f, how=how) if f.serves_malloc else f
                                                   for f in from_names.found])
    kind = library_kind(path)
    how = "malloc resolves to this library (dladdr)"
    if kind is None:
        kind = "unknown"
        program = os.path.realpath(path) == os.path.realpath("/proc/self/exe")
        how = f"malloc is defined in {path}" + (" (the program itself)" if program else "")
    known = signs()
    others = [k for k in [from_names.name, *from_names.others]
              if k not in (kind, "unknown") and not known.everywhere(k)]
    found = [FoundAllocator(kind, path, "", how, True),
             *(FoundAllocator(f.name, f.library, f.prefix, "library mapped in the process")
               for f in from_names.found if f.name in others)]
    return AllocatorDetection(kind, path, how, others, found)
