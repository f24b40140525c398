"""Inside a running process, through gdb: glibc's malloc_info, jemalloc's
mallctl, tcmalloc's MallocExtension properties, mimalloc's mi_process_info, an
in-process snapshot of a Python process, and a trim (glibc's malloc_trim(0),
jemalloc's arena.<ALL>.purge, tcmalloc's ReleaseFreeMemory, mimalloc's mi_collect).

Only on request (``memgap inspect --deep`` or ``--trim``); everything else memgap
reads from outside. ``sources/gdb_attach.py`` attaches, runs the calls with
timeouts and always lets go; this module picks the calls, reads what they wrote
(into a private directory memgap makes), and compares it with the outside walk
(pure functions). Every figure carries its route: ``outside``, ``gdb
malloc_info``, ``gdb mallctl`` (``sources/jemalloc_gdb``), ``gdb MallocExtension``
(``sources/tcmalloc_gdb``), ``gdb mi_process_info`` (``sources/mimalloc_gdb``) or
``gdb in-process``.
"""
from __future__ import annotations

import json
import os
import posixpath
import shutil
import stat as stat_module
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from memgap.allocators.base import AllocatorReader, DeepFigures, GdbPlan
from memgap.allocators.gdb_routes import outside_estimate
from memgap.allocators.jemalloc_beside import beside_plan
from memgap.allocators.registry import all_readers, reader_for
from memgap.diagnose.findings import allocator_findings
from memgap.documents.json_value import JsonObject, shaped
from memgap.documents.own_figures import OwnFiguresTable
from memgap.documents.routes import IN_PROCESS, MALLOC_INFO, OUTSIDE
from memgap.documents.snapshot import Snapshot
from memgap.documents.trim import TrimDetails, TrimRecord
from memgap.errors import MalformedInput, Unsupported
from memgap.inside.trust import trusted_inside
from memgap.sources.allocator import process_root
from memgap.sources.gdb_attach import GdbSession
from memgap.sources.gdb_errors import CallFailed, GdbTimeout
from memgap.sources.gdb_options import GdbOptions
from memgap.sources.glibc import MallocInfo, parse_malloc_info
from memgap.sources.procfs import ProcReader, is_python

ROUTE_OUTSIDE = OUTSIDE
ROUTE_MALLOC_INFO = MALLOC_INFO
ROUTE_IN_PROCESS = IN_PROCESS
MAX_RESULT = 64 << 20  # bytes read back from a file the process wrote
MAX_GIL_PROBES = 16    # threads asked whether they hold the GIL
# A call that runs Python code is never interrupted by gdb: unwound, it would leave the GIL taken (the
# program hangs) and the thread's frames pointing into memgap's. The code stops itself at the
# session's deadline (PYTHON_BUDGET_MIN at least), and gdb waits PYTHON_GRACE more for it to return.
PYTHON_BUDGET_MIN = 0.5
PYTHON_GRACE = 10.0



class MmappedCount(TypedDict, total=False):
    """glibc's mmapped chunks as one route counts them (``resident``: the outside walk's only)."""

    route: str
    count: int
    bytes: int
    resident: int


class MmappedChunks(TypedDict, total=False):
    """glibc's mmapped chunks by malloc_info (``gdb``) and by the outside walk ({} where malloc_info was not read)."""

    gdb: MmappedCount
    outside: MmappedCount


@dataclass
class DeepResult:
    """What --deep found inside the process, beside the outside snapshot it was compared with."""

    pid: int
    malloc_info: MallocInfo | None = None
    arenas: list[dict[str, Any]] = field(default_factory=list)   # compare_arenas rows
    mmapped: MmappedChunks = field(default_factory=lambda: MmappedChunks())
    in_process: Snapshot | None = None
    # reader name -> the allocator's own figures read through gdb (its reader's read_deep)
    figures: dict[str, DeepFigures] = field(default_factory=dict)
    with_allocator: Snapshot | None = None  # the outside snapshot, allocator layers from the allocator's figures
    # where the figures are of an allocator beside glibc's malloc (a prefixed jemalloc): which ("jemalloc (je_) in x")
    beside: str = ""
    tables: list[OwnFiguresTable] = field(default_factory=list)  # the figures as their readers lay them out
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        info = self.malloc_info
        readers = deep_readers()
        own: dict[str, Any] = {}
        for r in readers:  # each reader that reads through gdb, figures or not: the keys documents always had
            own[r.name] = self.figures[r.name].to_dict() if r.name in self.figures else None
            if r.read_beside:
                own[f"{r.name}_beside"] = self.beside
        return {
            "routes": [ROUTE_OUTSIDE, *([ROUTE_MALLOC_INFO] if info else []),
                       *(r.deep_key for r in readers if r.name in self.figures),
                       *([ROUTE_IN_PROCESS] if self.in_process else [])],
            "malloc_info": None if info is None else {
                "route": ROUTE_MALLOC_INFO, "arenas": len(info.arenas), "system": info.system,
                "mmap_count": info.mmap_count, "mmap_bytes": info.mmap_bytes,
                "free": sum(a.free for a in info.arenas)},
            "arenas": self.arenas,
            "mmapped": shaped(self.mmapped),
            "in_process": self.in_process.to_dict(regions=False) if self.in_process else None,
            **own,
            "with_allocator": self.with_allocator.to_dict(regions=False) if self.with_allocator else None,
            "notes": self.notes,
            "gdb_seconds": {k: round(v, 4) for k, v in self.timings.items() if k in ("attach", "held")},
        }

    @property
    def allocator_figures(self) -> tuple[str, DeepFigures] | None:
        """The allocator whose own figures gdb read (the one serving malloc, else a jemalloc beside it),
        and the figures (None where none were)."""
        return next(((r.name, self.figures[r.name]) for r in deep_readers() if r.name in self.figures), None)


def deep_readers() -> list[AllocatorReader]:
    """The readers whose own figures gdb reads, in the registry's order."""
    return [r for r in all_readers().values() if r.deep_key]


# --- comparisons (pure) --------------------------------------------------------

def compare_arenas(outside_rows: list[dict[str, Any]], info: MallocInfo) -> list[dict[str, Any]]:
    """Pair the arenas malloc_info lists with those the outside walk found.

    The main arena pairs with malloc_info's heap 0; thread arenas by the
    nearest system size (the process ran between the two reads, so sizes may
    have moved a little). An arena on one side only keeps None on the other.
    """
    gdb_rest = [a for a in info.arenas if a.nr != 0]
    pairs = [(next((r for r in outside_rows if r["main"]), None), next((a for a in info.arenas if a.nr == 0), None))]
    for row in sorted((r for r in outside_rows if not r["main"]), key=lambda r: -r["system"]):
        best = min(gdb_rest, key=lambda a: (abs(a.system - row["system"]), a.nr), default=None)
        if best is not None:
            gdb_rest.remove(best)
        pairs.append((row, best))
    pairs += [(None, a) for a in gdb_rest]
    rows = []
    for out, arena in pairs:
        if arena is not None:
            nr, main = arena.nr, bool(out["main"]) if out else arena.nr == 0
        elif out is not None:
            nr, main = out["arena"], bool(out["main"])
        else:
            continue
        rows.append({
            "arena": nr,
            "main": main,
            "system_gdb": arena.system if arena else None,
            "system_outside": out["system"] if out else None,
            "free_gdb": arena.free if arena else None,
            "in_use_gdb": arena.in_use if arena else None,
            "resident_outside": out["resident"] if out else None,
            # free bytes on resident pages (whole free pages in a document from before the split)
            "free_resident_outside": out.get("free_bytes_resident", out["free_resident"]) if out else None,
            "in_use_outside": out.get("in_use_resident") if out else None,
            # bytes in the free chunks the walk visits: the top chunk, the bins and the fastbins
            "free_walked_outside": out.get("free_walked") if out else None,
            "trim_releasable_outside": out["trim_releasable"] if out else None,
        })
    return rows


def outside_mmapped(snap: Snapshot) -> MmappedCount:
    """glibc's mmapped chunks as the outside walk found them (needs the snapshot's regions)."""
    chunks = [r for r in snap.regions if r.owner == "mmapped-chunk"]
    return {"count": len(chunks), "bytes": sum(r.end - r.start for r in chunks),
            "resident": sum(r.resident for r in chunks)}


# --- files the process writes for us ------------------------------------------

@contextmanager
def private_dir(pid: int, proc_root: str = "/proc") -> Iterator[tuple[str, str]]:
    """A fresh 0700 directory for files the process writes: (path here, path as the process sees it).

    Made in the process's own /tmp (through /proc/PID/root, so a process in a
    container gets a path it can open), owned by the process's user when memgap
    runs as root for another user; removed afterwards.
    """
    root = f"{proc_root}/{pid}/root"
    try:
        same_root = os.path.samefile(root, "/")
    except OSError:
        same_root = True
    if same_root:
        here = tempfile.mkdtemp(prefix="memgap-gdb-")
        there = here
    else:
        here = tempfile.mkdtemp(prefix="memgap-gdb-", dir=os.path.join(root, "tmp"))
        there = posixpath.join("/tmp", os.path.basename(here))
    try:
        uid, gid = _fs_ids(pid, proc_root)
        if os.geteuid() == 0 and uid != 0:
            os.chown(here, uid, gid)
        yield here, there
    finally:
        shutil.rmtree(here, ignore_errors=True)


def _fs_ids(pid: int, proc_root: str) -> tuple[int, int]:
    """The uid and gid the process creates files with (the fourth of status's Uid and Gid)."""
    status = ProcReader(pid, proc_root).status()
    ids = []
    for key in ("Uid", "Gid"):
        words = str(status.get(key, "")).split()
        ids.append(int(words[3]) if len(words) >= 4 else os.geteuid())
    return ids[0], ids[1]


def read_private(path: str, limit: int = MAX_RESULT) -> str:
    """A file the process wrote: a regular file (never a link it planted), bounded in size."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat_module.S_ISREG(info.st_mode) or info.st_size > limit:
            raise MalformedInput(os.path.basename(path), "not a regular file of a sane size")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise MalformedInput(os.path.basename(path), "larger than expected")
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(fd)


# --- the calls -------------------------------------------------------------------

def malloc_info_via_gdb(session: GdbSession, here: str, there: str) -> MallocInfo:
    """``malloc_info(0, fp)`` into a file of the private directory, parsed."""
    name = "malloc_info.xml"
    path, mode = session.put_strings(posixpath.join(there, name), "w")
    fp = session.call_int(f"(unsigned long) fopen((char *) {path}, (char *) {mode})", "fopen")
    if not fp:
        raise CallFailed("fopen", f"the process could not create {posixpath.join(there, name)}")
    try:
        rc = session.call_int(f"(int) malloc_info(0, (void *) {fp})", "malloc_info")
    finally:
        if session.usable:
            session.call_int(f"(int) fclose((void *) {fp})", "fclose")
    if rc != 0:
        raise CallFailed("malloc_info", f"returned {rc}")
    return parse_malloc_info(read_private(os.path.join(here, name)))


# Run by PyRun_SimpleString in the process. exec() with its own globals, so
# nothing is left in __main__; no exception escapes, so nothing is printed on
# the process's stderr (PyRun_SimpleString prints what escapes it).
_RUNNER = "try:\n    exec({script!r}, {{'__name__': '__memgap_gdb__'}})\nexcept Exception:\n    pass\n"
_SCRIPT = """\
import json, os, sys, time
out, src, deadline = {out!r}, {src!r}, time.monotonic() + {budget!r}
def _stop(frame, event, arg):  # at memgap's deadline, raised in memgap's own code: the snapshot ends cleanly
    if time.monotonic() > deadline:
        raise TimeoutError("memgap's time in the process ran out")
tracer = sys.gettrace()
sys.settrace(_stop)  # this thread only; each Python call of the snapshot checks the time
added = src not in sys.path
if added:
    sys.path.insert(0, src)  # first: a module of the program's own named memgap must not be taken for it
try:
    known = sys.modules.get("memgap")
    if known is not None and not str(getattr(known, "__file__", "")).startswith(src + os.sep):
        raise ImportError(f"the program has a module of its own named memgap ({{getattr(known, '__file__', '')}})")
    import memgap
    if not str(memgap.__file__).startswith(src + os.sep):
        raise ImportError(f"memgap was found at {{memgap.__file__}}, not in {{src}}")
    result = {{"ok": True, "memgap": memgap.__file__,
              "snapshot": memgap.snapshot(regions=False).to_dict(regions=False)}}
except Exception as exc:
    result = {{"ok": False, "error": f"{{type(exc).__name__}}: {{exc}}"}}
finally:
    sys.settrace(tracer)
    if added and src in sys.path:
        sys.path.remove(src)
with open(out + ".part", "w") as fh:
    json.dump(result, fh, default=str)
os.replace(out + ".part", out)
"""


def python_runner(out: str, src: str, budget: float = PYTHON_BUDGET_MIN) -> str:
    """The code given to PyRun_SimpleString: a snapshot of the process, written as JSON to ``out``;
    past ``budget`` seconds its Python code raises TimeoutError, caught there (the call returns)."""
    return _RUNNER.format(script=_SCRIPT.format(out=out, src=src, budget=round(budget, 3)))


def memgap_source_dir() -> str:
    """The directory holding the memgap package, for the process's sys.path: this module's
    (memgap/inside/gdb.py) folder's grandparent; no import of the package's API from down here."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _thread_without_gil(session: GdbSession) -> str | None:
    """A thread that does not hold the GIL, the main thread first.

    A thread holding it is somewhere in the interpreter, at no safe point:
    Python code run there could find the interpreter half-way through an
    operation. One that does not hold it takes it (PyGILState_Ensure) when
    the holder hands it over, at a safe point. Asked with the scheduler
    locked, so no thread takes or drops the GIL in between.
    """
    session.scheduler_locking(True)
    try:
        for gid, _lwp in session.threads()[:MAX_GIL_PROBES]:
            session.select_thread(gid)
            if session.call_int("(int) PyGILState_Check()", "PyGILState_Check") == 0:
                return gid
        return None
    finally:
        session.scheduler_locking(False)


SNAPSHOT_FILE = "snapshot.json"


def python_snapshot_via_gdb(session: GdbSession, there: str, notes: list[str]) -> bool:
    """memgap.snapshot() run inside a Python process, written to the private directory: True once it
    ran, False (and a note) when it could not. ``read_python_snapshot`` reads it, after the detach."""
    try:
        if not session.call_int("(int) Py_IsInitialized()", "Py_IsInitialized"):
            notes.append("in-process snapshot: the interpreter is not initialized (starting or exiting)")
            return False
    except CallFailed as exc:
        notes.append(f"in-process snapshot: no CPython C API found in the process ({exc.gdb_message.strip()[:80]})")
        return False
    thread = _thread_without_gil(session)
    if thread is None:
        notes.append("in-process snapshot: every thread asked holds the GIL (or the check is off): "
                     "not safe to run Python code now; try again")
        return False
    session.select_thread(thread)
    budget = max(PYTHON_BUDGET_MIN, session.deadline - time.monotonic())
    (code,) = session.put_strings(python_runner(posixpath.join(there, SNAPSHOT_FILE), memgap_source_dir(), budget))
    gil = session.call_int("(int) PyGILState_Ensure()", "PyGILState_Ensure")
    try:
        session.call_int(f"(int) PyRun_SimpleString((char *) {code})", "PyRun_SimpleString",
                         patience=budget + PYTHON_GRACE)
    finally:
        if session.usable:
            session.call(f"(void) PyGILState_Release({gil})", "PyGILState_Release", patience=PYTHON_GRACE)
    return True


def read_python_snapshot(here: str, notes: list[str]) -> Snapshot | None:
    """The snapshot the process wrote; None (and a note) when it wrote none or one that does not read."""
    try:
        data = json.loads(read_private(os.path.join(here, SNAPSHOT_FILE)))
        if not data.get("ok"):
            notes.append(f"in-process snapshot failed in the process: {data.get('error')} "
                         f"(memgap from {memgap_source_dir()})")
            return None
        snap = Snapshot.from_dict(data["snapshot"])
    except FileNotFoundError:
        notes.append("in-process snapshot: the process wrote no result (it could not run memgap's code)")
        return None
    except (ValueError, MalformedInput, AttributeError) as exc:  # AttributeError: JSON that is not an object
        notes.append(f"in-process snapshot: unreadable result ({exc})")
        return None
    snap.route = ROUTE_IN_PROCESS
    notes.append("the in-process snapshot includes memgap's own import into the process, which stays loaded")
    return snap


def deep(pid: int, outside: Snapshot, start_time: int | None, options: GdbOptions) -> DeepResult:
    """malloc_info (glibc) or another allocator's own figures and, for Python, an in-process
    snapshot, through one gdb attach."""
    glibc = reader_for(outside.allocator.name).reads_malloc_info
    python = is_python(ProcReader(pid, options.proc_root).maps())
    plan, notes = _allocator_plan(pid, outside, python, options.proc_root)
    beside, beside_label, why_not = beside_plan(pid, outside, options.proc_root)
    result = DeepResult(pid, notes=notes + ([why_not] if why_not else []))
    # non-stop for Python: its threads wait on the GIL, and held between calls they stalled ~0.4 s
    session = options.session(pid, start_time, non_stop=python)
    ran = False
    try:
        with ExitStack() as stack:
            here, there = stack.enter_context(private_dir(pid, options.proc_root))
            stack.enter_context(session)
            if glibc:
                try:
                    result.malloc_info = malloc_info_via_gdb(session, here, there)
                except (CallFailed, MalformedInput) as exc:
                    result.notes.append(f"malloc_info: {exc}")
            if plan is not None:
                _allocator_via_gdb(session, plan, result, required=not python)
            if beside is not None and session.usable:
                _allocator_via_gdb(session, beside, result, required=False)
                result.beside = beside_label if beside.allocator in result.figures else ""
            if python and session.usable:
                try:
                    ran = python_snapshot_via_gdb(session, there, result.notes)
                except (CallFailed, MalformedInput) as exc:
                    result.notes.append(f"in-process snapshot: {exc}")
                except GdbTimeout as exc:
                    if result.malloc_info is None and result.allocator_figures is None:
                        raise
                    result.notes.append(f"in-process snapshot: {exc}")
            session.close()  # the process is let go before what it wrote is read and parsed
            result.in_process = read_python_snapshot(here, result.notes) if ran else None
    finally:
        result.notes.extend(session.notes)
        result.timings = dict(session.timings)
    if result.in_process is not None:  # under tracemalloc, the outside reading of the heaps is the one to trust
        result.in_process, why = trusted_inside(outside, result.in_process)
        result.notes.extend([why] if why else [])
    if result.malloc_info is not None:
        layer = outside.layers.get("allocator_free")
        result.arenas = compare_arenas(layer.detail.get("arenas", []) if layer else [], result.malloc_info)
        result.mmapped = {"gdb": {"route": ROUTE_MALLOC_INFO, "count": result.malloc_info.mmap_count,
                                  "bytes": result.malloc_info.mmap_bytes},
                          "outside": {"route": ROUTE_OUTSIDE, **outside_mmapped(outside)}}
    if result.allocator_figures is not None:
        name, figures = result.allocator_figures
        result.with_allocator = with_allocator_layers(outside, name, figures,
                                                      outside.allocator.name if result.beside else "")
    rss = result.with_allocator.rss if result.with_allocator is not None else 0
    result.tables = [r.deep_table(result.figures[r.name], rss, result.beside)
                     for r in deep_readers() if r.name in result.figures]
    return result


def _allocator_plan(pid: int, outside: Snapshot, python: bool, proc_root: str) -> tuple[GdbPlan | None, list[str]]:
    """What to read of the allocator serving malloc where it is not glibc's, and notes on what
    --deep cannot read; Unsupported where it can read nothing."""
    name = outside.allocator.name
    plan, why_not = gdb_plan(pid, outside, proc_root)
    malloc_info = reader_for(name).reads_malloc_info
    if not malloc_info and not python and plan is None:
        raise Unsupported(why_not or f"--deep reads glibc's malloc_info, jemalloc's mallctl, tcmalloc's and "
                          f"mimalloc's own figures or a Python process's own snapshot; PID {pid} runs {name} malloc "
                          "and no Python")
    notes = [f"malloc_info: the process runs {name}, not glibc's malloc"] if not malloc_info and not plan else []
    return plan, notes + ([why_not] if why_not else [])


def gdb_plan(pid: int, outside: Snapshot, proc_root: str = "/proc",
             option: str = "--deep") -> tuple[GdbPlan | None, str]:
    """What gdb calls where jemalloc, tcmalloc or mimalloc serves malloc (None elsewhere), and,
    where it cannot be called, the one-line reason."""
    serving = outside.allocator.serving
    own = reader_for(serving.name if serving else None)
    if serving is None or not own.deep_key:
        return None, ""
    try:
        return own.deep_plan(serving, process_root(f"{proc_root}/{pid}")), ""
    except Unsupported as exc:
        return None, f"{option} {own.calls[option == '--trim']} in PID {pid}: {exc}"


def _allocator_via_gdb(session: GdbSession, plan: GdbPlan, result: DeepResult, required: bool) -> None:
    """The allocator's own figures into ``result``; a failure is the command's error where they are all
    --deep reads (``required``), else a note."""
    own = reader_for(plan.allocator)
    try:
        result.figures[own.name] = own.read_deep(session, plan)
    except (CallFailed, MalformedInput, Unsupported) as exc:
        if required:
            raise
        result.notes.append(f"{own.deep_label or own.name}: {exc}")


def with_allocator_layers(outside: Snapshot, name: str, figures: DeepFigures, beside: str = "") -> Snapshot:
    """The outside snapshot with its allocator layers from allocator ``name``'s own figures (its reader's
    ``deep_layers``), added to those of ``beside`` (glibc's, walked from outside) where jemalloc sits beside
    it; the moved layers have no PSS split, so none is shown."""
    own = reader_for(name)
    layers, unexplained = own.deep_layers(outside.layers, outside.rss, figures, beside)
    snap = replace(outside, layers=layers, unexplained=unexplained, regions=[], findings=[],
                   route=f"{ROUTE_OUTSIDE}, allocator layers from {own.deep_key}", pss_unexplained=None,
                   allocator=replace(outside.allocator, gdb={**outside.allocator.gdb, name: figures.to_dict()}))
    # what the C allocators' own figures say of their free memory (pymalloc's finding is the outside snapshot's,
    # not asked again here)
    snap.findings = allocator_findings(snap, serving_malloc=True)
    return snap


def trim(pid: int, before: Snapshot, start_time: int | None, options: GdbOptions) -> TrimRecord:
    """The allocator's trim in the process (glibc's ``malloc_trim(0)``, jemalloc's purge, tcmalloc's and
    mimalloc's release calls: its reader's ``release``); VmRSS around it, beside the estimate made before.

    A process with memgap's native agent is asked through the agent (no gdb;
    jemalloc, tcmalloc and mimalloc then trim with their own calls).
    """
    if before.allocator.agent is not None:
        return _trim_via_agent(pid, options.proc_root, outside_estimate(before))
    own = reader_for(before.allocator.name)
    plan = None
    if own.deep_key:  # its own calls, where gdb can make them
        plan, why_not = gdb_plan(pid, before, options.proc_root, "--trim")
        if plan is None:
            raise Unsupported(why_not)
    return own.release(pid, before, start_time, options, plan)


def _trim_via_agent(pid: int, proc_root: str, estimate: TrimDetails) -> TrimRecord:
    from memgap.agent.client import trim_pid

    trimmed = trim_pid(pid, proc_root)
    trimmed.details = TrimDetails(returned=None, notes=[], **estimate)
    return trimmed
