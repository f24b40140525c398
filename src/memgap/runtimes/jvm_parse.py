"""The JVM's figures from what it tells: its perf data counters, its JDK's ``release`` file, its
command line's flags, and the text of ``jcmd PID GC.heap_info`` and ``VM.native_memory summary``.

Pure: text or parsed counters in, figures out (memgap.runtimes.jvm does the reading).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from memgap.errors import MalformedInput
from memgap.sources.hsperfdata import PerfData

PAGE = 4096
_GEN = re.compile(r"sun\.gc\.generation\.(\d+)\.(capacity|maxCapacity)$")
_SPACE_USED = re.compile(r"sun\.gc\.generation\.\d+\.space\.\d+\.used$")
_SIZE = re.compile(r"^(\d+)([kKmMgGtT]?)$")
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# Collectors whose generations share one heap, each generation's maximum being all of it (G1's
# young and old; generational ZGC's): the heap's maximum is one of them, not their sum.
_SHARED_HEAP_POLICIES = ("GarbageFirst",)
_SHARED_HEAP_COLLECTORS = ("G1 ", "ZGC ", "Z ")
# The launcher's options that take the next word as their value (the rest are one word each).
_TAKES_A_VALUE = frozenset({"-cp", "-classpath", "--class-path", "-p", "--module-path", "--upgrade-module-path",
                            "--add-modules", "--add-opens", "--add-exports", "--add-reads", "--patch-module",
                            "--limit-modules", "--enable-native-access"})


@dataclass
class JvmFigures:
    """The Java heap and the class metadata, in bytes, as the perf data counts them."""

    used: int                    # live objects and garbage not yet collected: every space's used
    committed: int               # every generation's capacity (G1's 8-byte pads taken off)
    limit: int | None            # the heap's maximum (-Xmx)
    metaspace_committed: int | None = None   # class metadata, class space included (as of the last GC)
    metaspace_used: int | None = None
    class_space_committed: int | None = None
    class_space_used: int | None = None
    class_space_reserved: int | None = None
    policy: str = ""
    collectors: list[str] = field(default_factory=list)
    vm_args: str = ""
    java_command: str = ""
    version: str = ""
    attach_supported: bool | None = None     # sun.rt.jvmCapabilities' first flag


def jvm_figures(perf: PerfData) -> JvmFigures:
    """The heap's used, committed and maximum bytes from the sun.gc.generation counters."""
    capacity: dict[int, int] = {}
    maximum: dict[int, int] = {}
    for name, counter in perf.counters.items():
        match = _GEN.match(name)
        if match and isinstance(counter.value, int):
            (capacity if match[2] == "capacity" else maximum)[int(match[1])] = counter.value
    if not capacity:
        raise MalformedInput("hsperfdata", "no sun.gc.generation.N.capacity counter: no Java heap told")
    used = sum(c.value for n, c in perf.counters.items() if _SPACE_USED.match(n) and isinstance(c.value, int))
    collectors = [perf.text(f"sun.gc.collector.{i}.name") or "" for i in range(8)]
    collectors = [c for c in collectors if c]
    policy = perf.text("sun.gc.policy.name") or ""
    # G1 pads each space's capacity by an object alignment (8 bytes) so it never reads 0: a heap's
    # sizes are whole pages, so rounding down to a page takes the pads off.
    committed = sum(_page_floor(v) for v in capacity.values())
    shared = policy in _SHARED_HEAP_POLICIES or any(c.startswith(_SHARED_HEAP_COLLECTORS) for c in collectors)
    maxima = [_page_floor(v) for v in maximum.values() if v > 0]
    limit = (max(maxima) if shared else sum(maxima)) if maxima else None
    capabilities = perf.text("sun.rt.jvmCapabilities")
    return JvmFigures(
        used=used, committed=committed, limit=limit,
        metaspace_committed=perf.number("sun.gc.metaspace.capacity"),
        metaspace_used=perf.number("sun.gc.metaspace.used"),
        class_space_committed=perf.number("sun.gc.compressedclassspace.capacity"),
        class_space_used=perf.number("sun.gc.compressedclassspace.used"),
        class_space_reserved=perf.number("sun.gc.compressedclassspace.maxCapacity"),
        policy=policy, collectors=collectors,
        vm_args=perf.text("java.rt.vmArgs") or "", java_command=perf.text("sun.rt.javaCommand") or "",
        version=perf.text("java.property.java.vm.version") or "",
        attach_supported=capabilities[:1] == "1" if capabilities else None)


def _page_floor(value: int) -> int:
    return value - value % PAGE if value > 0 else 0


def parse_size(text: str) -> int | None:
    """A HotSpot size ("1g", "512m", "65536k", "1073741824"), in bytes; None if it is not one."""
    match = _SIZE.match(text.strip())
    return int(match[1]) * _UNIT[match[2].lower()] if match else None


def vm_flags(args: list[str]) -> dict[str, str]:
    """The JVM's flags from its arguments: -XX:Name=value, -XX:+Name ("true"), -XX:-Name ("false"),
    and -Xmx/-Xms/-Xss/-Xmn as HotSpot's names for them (MaxHeapSize, ...). A later flag wins, as in
    HotSpot; what follows the main class (or -jar's file, or -m's module) is the program's, not read."""
    flags: dict[str, str] = {}
    short = {"-Xmx": "MaxHeapSize", "-Xms": "InitialHeapSize", "-Xss": "ThreadStackSize", "-Xmn": "NewSize"}
    words = iter(args)
    for arg in words:
        if arg.startswith(("-XX:+", "-XX:-")):
            flags[arg[5:]] = "true" if arg[4] == "+" else "false"
        elif arg.startswith("-XX:") and "=" in arg:
            name, _, value = arg[4:].partition("=")
            flags[name] = value
        elif arg[:4] in short and len(arg) > 4:
            flags[short[arg[:4]]] = arg[4:]
        elif arg == "-Xrs":
            flags["ReduceSignalUsage"] = "true"
        elif arg in _TAKES_A_VALUE:
            next(words, None)
        elif arg in ("-jar", "-m", "--module") or not arg.startswith("-"):
            break
    return flags


def split_vm_args(vm_args: str) -> list[str]:
    """java.rt.vmArgs (one string, space-separated as the JVM joined them) as a list."""
    try:
        return shlex.split(vm_args)
    except ValueError:
        return vm_args.split()


def parse_release(text: str) -> dict[str, str]:
    """A JDK's ``release`` file: KEY="value" lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().isidentifier():
            out[key.strip()] = value.strip().strip('"')
    return out


@dataclass
class HeapInfo:
    """``jcmd PID GC.heap_info``: the heap's committed and used bytes and its reserved range."""

    committed: int | None = None
    used: int | None = None
    start: int | None = None
    end: int | None = None
    metaspace: dict[str, int] = field(default_factory=dict)    # used, committed, reserved
    class_space: dict[str, int] = field(default_factory=dict)


_HEAP_LINE = re.compile(r"total (\d+)([KMG]), used (\d+)([KMG])\s*\[(0x[0-9a-f]+), (?:0x[0-9a-f]+, )?(0x[0-9a-f]+)\)")
_META_LINE = re.compile(
    r"^\s*(Metaspace|class space)\s+used (\d+)([KMG]), committed (\d+)([KMG]), reserved (\d+)([KMG])")
_KMG = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_heap_info(text: str) -> HeapInfo:
    """G1, Parallel and Serial print a "total NK, used NK [start, ..., end)" line per heap or
    generation; the others print their own words (their heap figures are then left None)."""
    info = HeapInfo()
    for line in text.splitlines():
        heap = _HEAP_LINE.search(line)
        if heap:
            info.committed = (info.committed or 0) + int(heap[1]) * _KMG[heap[2]]
            info.used = (info.used or 0) + int(heap[3]) * _KMG[heap[4]]
            start, end = int(heap[5], 16), int(heap[6], 16)
            info.start = start if info.start is None else min(info.start, start)
            info.end = end if info.end is None else max(info.end, end)
            continue
        meta = _META_LINE.match(line)
        if meta:
            figures = {"used": int(meta[2]) * _KMG[meta[3]], "committed": int(meta[4]) * _KMG[meta[5]],
                       "reserved": int(meta[6]) * _KMG[meta[7]]}
            (info.metaspace if meta[1] == "Metaspace" else info.class_space).update(figures)
    if info.start is not None and info.end is not None and info.end <= info.start:
        raise MalformedInput("GC.heap_info", f"heap range [{info.start:#x}, {info.end:#x}) is empty")
    return info


_NMT_LINE = re.compile(r"^-\s+(.+?) \(reserved=(\d+)(KB|MB|GB|B), committed=(\d+)(KB|MB|GB|B)\)")
_NMT_TOTAL = re.compile(r"^Total: reserved=(\d+)(KB|MB|GB|B), committed=(\d+)(KB|MB|GB|B)")


def parse_native_memory(text: str) -> dict[str, tuple[int, int]]:
    """``jcmd PID VM.native_memory summary``: (reserved, committed) bytes by category ("Java Heap",
    "Class", "Thread", "Code", "GC", ...; "Total"); empty where tracking is off."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        match = _NMT_LINE.match(line) or _NMT_TOTAL.match(line)
        if match is None:
            continue
        groups = match.groups()
        name = "Total" if len(groups) == 4 else groups[0]
        figures = groups[-4:]
        out[name] = (int(figures[0]) * _KMG[figures[1][0]], int(figures[2]) * _KMG[figures[3][0]])
    return out
