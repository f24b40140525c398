"""What the bootstrap installs in a Python child of ``memgap run`` or ``memgap lab``."""
from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
import time

from memgap.record.envnames import (
    BEFORE_EXIT_PHASE,
    EXIT_HOLD_SECONDS,
    EXIT_READS_ENV,
    EXIT_SOCKET_ENV,
    GC_FREEZE_ENV,
    RECORD_DIR_ENV,
    TRIM_AFTER_ENV,
    TRIM_EVERY_ENV,
    TRIMMER_ENV,
)

TYPE_CHECKING = False  # typing's own, without importing typing: a recorded program's start pays for it (10 ms)

if TYPE_CHECKING:
    from memgap.documents.json_value import JsonObject
    from memgap.record.recording import ProcessFile
    from memgap.remedies import TrimTimes

_installed = False  # the bootstrap's sitecustomize and memgap's .pth file may both ask
_own_atexit = 0  # atexit's handlers once the bootstrap installed (memgap's, the interpreter's): none of the program's
_exit_read_with_before = False  # its before-exit's read, held, stood for its exit snapshot too
_files: dict[str, ProcessFile] = {}  # this process's files for memgap's own events, by suffix


def _at_exit() -> None:
    from memgap.api import _record

    try:
        _record("exit")
    except Exception:  # noqa: BLE001 - never turn the program's exit into a failure
        pass


def _record_trim(rss_before: int, rss_after: int, times: TrimTimes) -> None:
    """Under `memgap run`/`lab`: what each of the trimmers' trims did, when, and its CPU, into the
    recording (the lab tells memgap's own CPU from the workload's bursts by them: memgap.lab.work)."""
    from memgap.documents.trim import TrimRecord, TrimRoute

    record = TrimRecord(rss_before, rss_after, TrimRoute.TRIMMER, time=times.ended, started=times.started,
                        cpu=round(times.cpu, 6))
    _write_event({"type": "trimmer", "pid": os.getpid(), **record.to_dict()})


def _trim_periodically(seconds: float) -> None:
    """Call malloc_trim(0) every ``seconds`` (glibc only), from a daemon thread."""
    from memgap.allocators.detect import detect_in_process
    from memgap.allocators.registry import reader_for
    from memgap.inside.pymalloc_release import release_if_asked
    from memgap.remedies import timed_trim
    from memgap.sources.glibc import glibc_malloc
    from memgap.sources.procfs import ProcReader

    try:
        if not reader_for(detect_in_process(ProcReader("self").maps()).name).libc_calls:
            return
        libc = glibc_malloc()
    except Exception:  # noqa: BLE001 - no trimmer rather than a broken program
        return
    stop = threading.Event()
    atexit.register(stop.set)

    def trim() -> None:
        libc.trim(0)
        release_if_asked()

    recorded = bool(os.environ.get(RECORD_DIR_ENV))
    status = ProcReader("self")

    def loop() -> None:
        while not stop.wait(seconds):
            if recorded:  # each trim with its span and CPU, as the idle trimmer's
                _record_trim(*timed_trim(trim, status))
            else:
                trim()

    threading.Thread(target=loop, name="memgap-trimmer", daemon=True).start()
    _trimmer_started(f"every {seconds:g} s")


def _snapshot_before_exit() -> None:
    """Under a recording, in a program that marks no idle: its snapshot as the interpreter
    starts to shut down (threading._shutdown runs before non-daemon threads are joined, the
    atexit handlers run and module teardown frees what the program held), the idle of a
    program that exits straight after its work (see memgap.record.idle). With
    MEMGAP_TRIM_AFTER=idle the lab's one trim follows it there: a trim at a quiet spell
    could change the bursts after it. No thread: one would cost the process a glibc arena.
    """
    shutdown = threading._shutdown  # type: ignore[attr-defined]  # private: the hook that joins threads at exit

    def before_shutdown() -> None:
        global _exit_read_with_before
        try:
            if _read_from_outside():
                _exit_read_with_before = _nothing_runs_between()
                _held_read(f"{BEFORE_EXIT_PHASE} exit" if _exit_read_with_before else BEFORE_EXIT_PHASE)
                return
            from memgap import api

            if "idle" not in api._own_phases:
                api._record(BEFORE_EXIT_PHASE)
                if os.environ.get(TRIM_AFTER_ENV) == "idle":
                    api._record("after-trim", api.trim())
        except Exception:  # noqa: BLE001 - never turn the program's exit into a failure
            pass
        finally:
            shutdown()

    threading._shutdown = before_shutdown  # type: ignore[attr-defined]  # as above


def _nothing_runs_between() -> bool:
    """As the interpreter begins to shut down: no thread but this one, and no atexit handler but those there
    before the program ran (memgap's own). Nothing of the program can then run before its exit snapshot
    (taken after atexit's handlers), and one held read stands for both: the second cost the exit 12 ms more
    for the same figures."""
    count = getattr(atexit, "_ncallbacks", None)  # CPython's
    return count is not None and threading.active_count() == 1 and count() == _own_atexit


def _read_from_outside() -> bool:
    """Under `memgap run`: this process's exits are read by the recorder from outside while it waits
    (``_held_read``), unless the program uses memgap's API itself (its phases are in-process: its exits
    then are too, alike) or CUDA through PyTorch (``_cuda_in_use``). memgap's snapshot machinery is then
    never loaded into a program that did not ask for it: its import (0.12 s, 3 MiB) and the in-process
    snapshots at its exit (0.13 s) were most of what `memgap run` added to a program's time."""
    return (os.environ.get(EXIT_READS_ENV) == "outside" and bool(os.environ.get(EXIT_SOCKET_ENV))
            and "memgap.api" not in sys.modules and not _cuda_in_use())


def _cuda_in_use() -> bool:
    """PyTorch with CUDA initialised: its caching allocator's counts (torch.cuda.memory_stats()) are read in the
    process alone, so its exit is snapshotted there (memgap's import then counted in it: 3 MiB of GiBs)."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch half torn down: read from outside
        return False


def _held_read(phase: str) -> None:
    """Wait while the recorder reads this process from outside as snapshot ``phase`` (``before-exit`` or
    ``exit``): "exit PHASE" to its socket, then its "ok", EXIT_HOLD_SECONDS at most all told. A recorder that is
    gone costs nothing, a slow one the exit that wait and no more."""
    import _socket  # not socket: its enums cost the exit 4 ms

    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return
    try:
        deadline = time.monotonic() + EXIT_HOLD_SECONDS
        sock.settimeout(EXIT_HOLD_SECONDS)
        sock.connect(os.environ.get(EXIT_SOCKET_ENV, ""))
        sock.sendall(f"exit {phase}\n".encode())
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.recv(8)  # "ok": read; nothing: the recorder let it go unread
    except OSError:
        pass
    finally:
        sock.close()


def _snapshots_at_exit() -> None:
    """This process's ``before-exit`` and ``exit`` snapshots: read from outside while it waits, where the
    recorder can (``_read_from_outside``, asked as it exits), else taken in-process."""
    def at_exit() -> None:
        if _read_from_outside():
            if not _exit_read_with_before:
                _held_read("exit")
        else:
            _at_exit()

    atexit.register(at_exit)  # registered first: run last, after the program's own atexit handlers
    _snapshot_before_exit()


def _write_event(event: JsonObject, suffix: str = ".trims") -> None:
    """One of memgap's own events (a trimmer's, a collection's), into a file of its own,
    process-PID{suffix}.jsonl: the recorder takes process-PID.jsonl as the sign that the program
    marks phases itself, which these are not."""
    from memgap.record.recording import ProcessFile

    file = _files.get(suffix)
    if file is None:
        file = _files[suffix] = ProcessFile(suffix)
    writer = file.writer()
    if writer is not None:
        writer.write(event)


def _trimmer_started(mode: str) -> None:
    """Under a recording: the trimmer runs in this process (the lab's evidence that it took)."""
    _write_event({"type": "trimmer-start", "pid": os.getpid(), "mode": mode})


_watching = False  # this process counts its full collections (memgap.record.tree_copies.Collections)
# their own file, written by the gc callback alone once it is registered: a collection may start inside
# any allocation, one in a write that holds another file's lock among them
COLLECTIONS = ".gc"


def _count_full_collections(phase: str, info: dict[str, int]) -> None:
    """A gc callback: each full collection, as it starts, one event (the run tells by them whether a forked
    worker's copies can be the collector's: memgap.diagnose.copies)."""
    if phase == "start" and info.get("generation") == 2:
        try:
            _write_event({"type": "full-collection", "pid": os.getpid(), "time": time.time()}, COLLECTIONS)
        except Exception:  # noqa: BLE001 - never turn the program's collection into a failure
            pass


def _watch_collections() -> None:
    """From a process's first fork on, in it and in each child it forks: their full collections counted. A
    worker's copies of its parent's objects are its reads or the collector's writes (its own or its
    parent's, after the fork); where no full collection ran, they are the reads. multiprocessing's workers
    end with os._exit, so each collection is written as it starts, not at exit. A child's own first fork
    is said again with its PID (``_child_watches_its_own_forks``)."""
    global _watching
    import gc

    if _watching:
        return
    _watching = True
    # In the first process that forks, written before the callback is registered. In a child that forks in
    # turn the callback came with it and may run inside this write: harmless, as the writer holds its lock
    # only around write(2), where no container is allocated and so no collection starts.
    try:
        _write_event({"type": "forks-watched", "pid": os.getpid(), "time": time.time()}, COLLECTIONS)
    except Exception:  # noqa: BLE001 - never turn the program's fork into a failure
        return
    if not any(cb is _count_full_collections for cb in gc.callbacks):
        gc.callbacks.append(_count_full_collections)


def _child_watches_its_own_forks() -> None:
    """In a child just forked: the callback came with it, but its own first fork is still to be said
    (``forks-watched`` with its PID), or the copies of its own children would keep both causes."""
    global _watching
    _watching = False


def freeze_at_fork() -> None:
    """The recipe of gc.freeze's documentation, for a program that forks workers: no
    collections in the parent (they leave holes in pages its children will share), every
    tracked object moved out of the collector's reach right before each fork, collections
    back on in the child, where they no longer write into (and so copy) the shared pages."""
    import gc

    gc.disable()
    os.register_at_fork(before=gc.freeze, after_in_child=gc.enable)


def _start_trimmer() -> bool:
    """memgap's idle trimmer in this process (MEMGAP_TRIMMER=1); False where malloc is not glibc's."""
    from memgap.errors import Unsupported
    from memgap.remedies import Trimmer

    try:
        trimmer = Trimmer(on_timed_trim=_record_trim if os.environ.get(RECORD_DIR_ENV) else None).start()
    except Unsupported:
        return False  # not glibc: nothing to trim, and the program runs as it would
    atexit.register(trimmer.stop)
    _trimmer_started("idle")
    return True


def install() -> None:
    global _installed, _own_atexit
    if _installed:
        return
    _installed = True
    _install()
    count = getattr(atexit, "_ncallbacks", None)
    _own_atexit = count() if count is not None else 0


def _install() -> None:
    if os.environ.get(GC_FREEZE_ENV) == "1":
        freeze_at_fork()
    if os.environ.get(RECORD_DIR_ENV):
        if not _read_from_outside():
            # the snapshot machinery loaded now, before the program runs: its phases must not carry
            # memgap's own import (about 3 MiB), which `import memgap` alone no longer pays for
            importlib.import_module(".api", __package__)
        _snapshots_at_exit()
        # before its first fork: a forked child inherits the callback, and writes its own events; a child
        # that forks in turn says its own first fork (a worker that starts readers of its own)
        os.register_at_fork(before=_watch_collections, after_in_child=_child_watches_its_own_forks)
    if os.environ.get(TRIMMER_ENV) == "1" and _start_trimmer():
        # a thread does not survive fork(): each forked worker (gunicorn, Celery prefork, a fork
        # Pool) starts one of its own, or MEMGAP_TRIMMER=1 would reach the master alone
        os.register_at_fork(after_in_child=_start_trimmer)
    every = os.environ.get(TRIM_EVERY_ENV)
    if every:
        try:
            seconds = float(every)
        except ValueError:
            return
        if seconds > 0:
            _trim_periodically(seconds)
