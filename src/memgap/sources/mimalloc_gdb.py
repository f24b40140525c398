"""mimalloc's own figures in another process, read through gdb by calling ``mi_process_info``.

One job: the calls to ``mi_process_info(&elapsed, &user, &system, &current_rss, &peak_rss,
&current_commit, &peak_commit, &page_faults)`` and ``mi_collect(true)`` (the call memgap's
native agent makes) for ``inspect --deep`` and ``--trim`` of a process whose malloc is
mimalloc, and what their results mean. ``GdbSession`` attaches, bounds every step in time
and always lets go; how the figures become layers is ``attribution``'s.

What mimalloc 2.0 can say: only its committed memory (``current_commit``, counted by its OS
layer in every build). Its allocated-bytes counters are compiled out of release builds
(MI_STAT 0: Debian's libmimalloc2.0 prints zeros for them), and on Linux 2.0's
``current_rss`` is an estimate equal to the committed bytes, not the resident pages. So
memgap measures what mimalloc holds (committed, and resident from outside), not how much of
it the program uses.

The eight results are written into one page memgap maps in the process (mmap, unmapped
before detaching: a malloc of memgap's would run mimalloc's delayed decommits, and change what
memgap came to read) and read back in one read; decoding is a pure function.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from memgap.documents.json_value import JsonObject
from memgap.documents.routes import MIMALLOC
from memgap.errors import MalformedInput, Unsupported
from memgap.sources.elf import SymbolQuery, require_callable

if TYPE_CHECKING:  # attribution imports the figures in-process too: no gdb machinery there
    from memgap.sources.gdb_attach import GdbSession

ROUTE = MIMALLOC
INFO = "mi_process_info"
COLLECT = "mi_collect"
CALL = "mi_collect(true)"


@dataclass(frozen=True)
class MimallocDeep:
    """What mimalloc says of itself through ``mi_process_info``, in its argument order."""

    elapsed_ms: int
    user_ms: int
    system_ms: int
    current_rss: int      # on Linux (2.0) the committed bytes again: an estimate, not the resident pages
    peak_rss: int         # getrusage's ru_maxrss
    current_commit: int   # memory mimalloc has committed from the OS now: in use and free together
    peak_commit: int
    page_faults: int

    @property
    def rss_is_commit(self) -> bool:
        """Whether current_rss is only the committed count repeated (mimalloc 2.0 on Linux)."""
        return self.current_rss == self.current_commit

    @property
    def releasable(self) -> None:
        """mimalloc counts no free bytes apart: what ``mi_collect`` returns is not known beforehand."""
        return None

    def to_dict(self) -> JsonObject:
        out = asdict(self)
        out.update(route=ROUTE, rss_is_commit=self.rss_is_commit, releasable=None)
        return out


SIZE = 8 * len(fields(MimallocDeep))


def info_expression(block: int) -> str:
    """The gdb expression calling mi_process_info with its eight results in ``block``."""
    args = ", ".join(f"(unsigned long *) {block + 8 * i}" for i in range(len(fields(MimallocDeep))))
    return f"(void) {INFO}({args})"


def decode_info(raw: bytes) -> MimallocDeep:
    """The block mi_process_info wrote, as MimallocDeep."""
    if len(raw) != SIZE:
        raise MalformedInput("mi_process_info results", f"{len(raw)} bytes, not {SIZE}")
    return MimallocDeep(*(int.from_bytes(raw[i:i + 8], "little") for i in range(0, SIZE, 8)))


def check_callable(found: dict[str, Any], query: SymbolQuery, root: str = "") -> None:
    """Unsupported, in one line, where gdb could not call mi_process_info and mi_collect in the object serving
    malloc (``FoundAllocator.to_dict()``), as read with detection's ``query``."""
    require_callable("mimalloc", found.get("library") or "", (INFO, COLLECT), bool(found.get("prefix")), query,
                     root)


def read_figures(session: GdbSession) -> MimallocDeep:
    """mi_process_info's eight results, written into a block of the process and read back."""
    from memgap.sources.gdb_errors import CallFailed

    block = session.alloc_pages(SIZE)
    try:
        session.call(info_expression(block), INFO)
    except CallFailed as exc:
        if "No symbol" in exc.gdb_message:
            raise Unsupported(f"gdb finds no {INFO} in the process: {exc.gdb_message.strip()[:80]}") from None
        raise
    return decode_info(session.read_memory(block, SIZE))


def release(session: GdbSession) -> None:
    """``mi_collect(true)``: mimalloc frees what it can and gives unused memory back (decommits) now."""
    session.call(f"(void) {COLLECT}(1)", CALL)
