"""gperftools' tcmalloc's own figures in another process, read through gdb by calling its C API.

One job: the calls to ``MallocExtension_GetNumericProperty(name, size_t *value)`` and
``MallocExtension_ReleaseFreeMemory()`` (the calls memgap's native agent makes) for
``inspect --deep`` and ``--trim`` of a process whose malloc is tcmalloc, and what their
results mean. ``GdbSession`` (gdb_attach) attaches, bounds every step in time and always
lets go; how the figures become layers is ``attribution``'s.

How a value comes back: the property writes into a ``size_t`` that must be memory of the
process. memgap maps one page there (mmap, unmapped before detaching: no malloc of memgap's
moves tcmalloc's counters), lays out one slot per name (value, return code) and the names
after them, runs every call in one gdb expression and reads the slots back in one read.
Laying out and decoding the page are pure functions.

What the properties say (gperftools 2.x): the page heap's system bytes (generic.heap_size)
are exactly the allocated bytes plus the page heap's free and unmapped bytes plus the
central, transfer and thread caches' free bytes; generic.total_physical_bytes adds
tcmalloc's metadata to what is mapped (heap_size - unmapped).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from memgap.documents.json_value import JsonObject
from memgap.documents.routes import TCMALLOC
from memgap.errors import MalformedInput, Unsupported
from memgap.sources.elf import SymbolQuery, require_callable

if TYPE_CHECKING:  # attribution imports the figures in-process too: no gdb machinery there
    from memgap.sources.gdb_attach import GdbSession

ROUTE = TCMALLOC
GET = "MallocExtension_GetNumericProperty"
RELEASE = "MallocExtension_ReleaseFreeMemory"
CALL = f"{RELEASE}()"
SLOT = 16        # value (8), return code (4), padding (4)
NOT_RUN = -1     # a return code slot the call never wrote

# The properties read, each with the field of TcmallocDeep it fills; the first six must answer.
PROPERTIES = (
    ("generic.current_allocated_bytes", "allocated"),
    ("generic.heap_size", "heap_size"),
    ("tcmalloc.pageheap_free_bytes", "pageheap_free"),
    ("tcmalloc.pageheap_unmapped_bytes", "pageheap_unmapped"),
    ("tcmalloc.central_cache_free_bytes", "central_cache_free"),
    ("tcmalloc.transfer_cache_free_bytes", "transfer_cache_free"),
    ("tcmalloc.thread_cache_free_bytes", "thread_cache_free"),
    ("generic.total_physical_bytes", "total_physical"),
    ("tcmalloc.current_total_thread_cache_bytes", "thread_cache_total"),
    ("tcmalloc.max_total_thread_cache_bytes", "thread_cache_max"),
    ("tcmalloc.aggressive_memory_decommit", "aggressive_decommit"),
)
REQUIRED = 7


# --- the slots (pure) --------------------------------------------------------------------

def encode_page(names: list[str]) -> tuple[bytes, list[int]]:
    """The page's initial bytes (each slot's value 0 and return code NOT_RUN, then the names,
    NUL-terminated) and each name's offset in it."""
    data = (bytes(8) + NOT_RUN.to_bytes(4, "little", signed=True) + bytes(4)) * len(names)
    offsets = []
    for name in names:
        offsets.append(len(data))
        data += name.encode() + b"\0"
    return data, offsets


def batch_expression(names: list[int], block: int) -> str:
    """One gdb expression calling GetNumericProperty for every name, each return code stored in its slot."""
    return ", ".join(f"(*(int *) {block + SLOT * i + 8} = (int) {GET}((char *) {name}, "
                     f"(unsigned long *) {block + SLOT * i}))" for i, name in enumerate(names))


def decode_slots(raw: bytes, names: list[str]) -> dict[str, int | None]:
    """Each property's value, or None where tcmalloc does not know it (it returned 0) or the call never ran."""
    if len(raw) != SLOT * len(names):
        raise MalformedInput("MallocExtension slots", f"{len(raw)} bytes for {len(names)} names")
    out: dict[str, int | None] = {}
    for i, name in enumerate(names):
        slot = raw[SLOT * i:SLOT * (i + 1)]
        rc = int.from_bytes(slot[8:12], "little", signed=True)
        out[name] = int.from_bytes(slot[:8], "little") if rc > 0 else None  # true: known
    return out


# --- the figures ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TcmallocDeep:
    """What tcmalloc says of itself, read through gdb at one moment."""

    allocated: int              # bytes handed to the program (rounded up to their size class)
    heap_size: int              # the page heap's system bytes, unmapped ones included
    pageheap_free: int          # free spans still mapped: what ReleaseFreeMemory returns now
    pageheap_unmapped: int      # free spans given back (madvise): virtual only
    central_cache_free: int     # free objects in the central lists, per size class
    transfer_cache_free: int    # free objects between the central lists and the threads
    thread_cache_free: int      # free objects in the threads' own caches
    total_physical: int | None = None       # mapped page heap plus metadata
    thread_cache_total: int | None = None
    thread_cache_max: int | None = None     # the bound tcmalloc keeps the thread caches under
    aggressive_decommit: int | None = None  # 1: free spans given back as they are freed

    @property
    def caches(self) -> int:
        """Free objects held in the central, transfer and thread caches (not returned by a release)."""
        return self.central_cache_free + self.transfer_cache_free + self.thread_cache_free

    @property
    def metadata(self) -> int:
        """tcmalloc's own bookkeeping: total_physical minus the mapped page heap (0 where not told)."""
        if self.total_physical is None:
            return 0
        return max(0, self.total_physical - (self.heap_size - self.pageheap_unmapped))

    @property
    def releasable(self) -> int:
        """What ``MallocExtension_ReleaseFreeMemory`` gives back now: the page heap's free spans."""
        return self.pageheap_free

    def to_dict(self) -> JsonObject:
        out = asdict(self)
        out.update(route=ROUTE, caches=self.caches, metadata=self.metadata, releasable=self.releasable)
        return out


def figures(values: dict[str, int | None]) -> TcmallocDeep:
    """The properties' values as one TcmallocDeep; Unsupported where tcmalloc knew none of the needed ones."""
    missing = [name for name, _ in PROPERTIES[:REQUIRED] if values.get(name) is None]
    if missing:
        raise Unsupported(f"tcmalloc's {GET} knows no {', '.join(missing)} (not gperftools' tcmalloc?)")
    fields = {field: values.get(name) for name, field in PROPERTIES}
    return TcmallocDeep(**fields)  # type: ignore[arg-type]  # the required ones are ints: checked above


# --- the calls ------------------------------------------------------------------------------

def check_callable(found: dict[str, Any], query: SymbolQuery, root: str = "") -> None:
    """Unsupported, in one line, where gdb could not call the C API in the object serving
    malloc (``FoundAllocator.to_dict()``), as read with detection's ``query``."""
    require_callable("tcmalloc", found.get("library") or "", (GET, RELEASE), bool(found.get("prefix")), query, root)


def read_figures(session: GdbSession) -> TcmallocDeep:
    """Every property in one gdb expression; the slots read back in one read."""
    from memgap.sources.gdb_errors import CallFailed

    names = [name for name, _ in PROPERTIES]
    data, offsets = encode_page(names)
    block = session.alloc_pages(len(data))
    session.write_memory(block, data)
    try:
        session.call(batch_expression([block + offset for offset in offsets], block), "MallocExtension properties")
    except CallFailed as exc:
        if "No symbol" in exc.gdb_message:
            raise Unsupported(f"gdb finds no {GET} in the process: {exc.gdb_message.strip()[:80]}") from None
        raise
    return figures(decode_slots(session.read_memory(block, SLOT * len(names)), names))


def release(session: GdbSession) -> None:
    """``MallocExtension_ReleaseFreeMemory()``: the page heap's free spans given back to the system now."""
    session.call(f"(void) {RELEASE}()", CALL)
