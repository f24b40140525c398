"""Runtimes that keep a heap of their own (Go, the JVM, V8), read from outside.

Each runtime is one module here (``go.py``, ``jvm.py``, ``v8.py``) with the same two functions:

- ``detect(process: ProcessView) -> RuntimeInfo | None``: is this process that runtime's (its
  program, its libraries, its symbols), and which version; from files and /proc only;
- ``read(process: ProcessView, info: RuntimeInfo) -> RuntimeHeap``: the runtime's own figures
  and the address ranges it owns, without stopping the process wherever the runtime allows,
  saying how it read them (``RuntimeHeap.route``) and what it could not (``notes``).

Each runtime's own settings, as lab variants (``go:gogc=50``), are a small module beside its reader
(``go_settings.py``, ``jvm_settings.py``, ``v8_settings.py``: memgap.runtimes.settings says what each
declares), registered apart from the readers so that parsing a variant loads no reader; so are a library's own
(``arrow_settings.py``: Arrow's memory pool; ``torch_settings.py``: PyTorch's CUDA caching allocator).

The registry (``READERS``, ``detect_runtimes``, ``SETTINGS``, ``runtime_settings``, ``runtime_variants``)
is the only place that knows their names.
"""
from __future__ import annotations

from memgap.documents.runtime_heap import DeepRead, HeapDetail
from memgap.runtimes.base import ProcessView, RuntimeHeap, RuntimeInfo, RuntimeReader
from memgap.runtimes.settings import RuntimeSettings

READERS: dict[str, RuntimeReader] = {}
SETTINGS: dict[str, RuntimeSettings] = {}  # by the spec's head ("go", "jvm", "node")
SETTINGS_MODULES = ("go_settings", "jvm_settings", "v8_settings", "arrow_settings", "torch_settings")


def register(name: str, reader: RuntimeReader) -> None:
    """Add a runtime's reader to the registry (each runtime module calls it once, at import)."""
    READERS[name] = reader


def all_readers() -> dict[str, RuntimeReader]:
    """Every runtime's reader, by name (each module imported once, so each has registered)."""
    _load_all()
    return dict(READERS)


def detect_runtimes(process: ProcessView) -> list[RuntimeInfo]:
    """Every runtime found in the process (a JVM loading a native library beside glibc is one runtime;
    several runtimes in one process are each listed)."""
    _load_all()
    found = []
    for reader in READERS.values():
        info = reader.detect(process)
        if info is not None:
            found.append(info)
    return found


def read_deep(pid: int, proc_root: str = "/proc") -> list[DeepRead]:
    """`inspect --deep` for the runtimes in a process: each reader's deep route where it has one (the
    JVM's jcmd, Node's inspector: the runtime's own supported ways, which touch the process), as JSON-ready
    figures with the route taken; where it has none or it fails, a line saying so."""
    import os

    from memgap.errors import MemgapError
    from memgap.sources.procfs import ProcReader

    with ProcReader(pid, proc_root) as reader:
        try:
            exe: str | None = os.readlink(f"{reader.base}/exe")
        except OSError:
            exe = None
        view = ProcessView(pid, reader, reader.maps(), exe)
        out: list[DeepRead] = []
        for info in detect_runtimes(view):
            runtime = READERS[info.name]
            deep = getattr(runtime, "read_deep", None)
            leaves_open = getattr(runtime, "deep_leaves_open", "")
            if deep is not None and leaves_open:  # not taken for the user: it would outlast memgap's read
                out.append({"runtime": info.name, "note": f"its deep route is not taken by --deep: {leaves_open}"})
                continue
            if deep is None:
                out.append({"runtime": info.name, "note": "no deep route: what memgap reads from outside is all "
                                                          "this runtime's own state tells"})
                continue
            try:
                heap = deep(view, info)
            except (MemgapError, OSError, ValueError) as exc:
                out.append({"runtime": info.name, "note": f"its deep route failed: {exc}"})
                continue
            # its figures, as RuntimeHeap holds them (its info and ranges left out)
            out.append({"runtime": info.name, "version": info.version, "route": heap.route, "in_use": heap.in_use,
                        "retained": heap.retained, "released": heap.released, "committed": heap.committed,
                        "limit": heap.limit, "metadata": dict(heap.metadata), "settings": dict(heap.settings),
                        "notes": list(heap.notes)})
    return out


def remedy(name: str, heap: HeapDetail) -> str:
    """What brings a runtime's retained heap back, as its reader words it (``remedy(heap_detail)``
    on the reader, where it has one), else the lab's line."""
    _load_all()
    words = getattr(READERS.get(name), "remedy", None)
    told = words(heap) if callable(words) else ""
    return told or f"measure the {name} runtime's own settings with `memgap lab` (its variants are in the default set)"


def register_settings(settings: RuntimeSettings) -> None:
    """Add a runtime's settings (each settings module calls it once, at import)."""
    SETTINGS[settings.prefix] = settings


def runtime_settings(prefix: str) -> RuntimeSettings | None:
    """The settings a variant's part names by its head (``go`` of ``go:gogc=50``), None for none."""
    _load_settings()
    return SETTINGS.get(prefix)


def settings_prefixes() -> tuple[str, ...]:
    """The heads a variant's runtime part may have."""
    _load_settings()
    return tuple(SETTINGS)


def runtime_variants(name: str, peak: int | None = None) -> tuple[str, ...]:
    """The variants that try runtime ``name``'s own settings (``name`` as its reader and the runtime_heap
    layer call it); ``peak``: the baseline's peak RSS, for a setting sized from it. () for a runtime with none."""
    _load_settings()
    return next((s.variants(peak) for s in SETTINGS.values() if s.runtime == name), ())


def library_settings(path: str) -> RuntimeSettings | None:
    """The settings of the library at ``path`` (its file name's beginning among a settings module's
    ``libraries``: Arrow's memory pool, PyTorch's CUDA cache), None for a library with none."""
    import os

    _load_settings()
    base = os.path.basename(path)
    return next((s for s in SETTINGS.values() if s.libraries and base.startswith(s.libraries)), None)


def _load_settings() -> None:
    import importlib

    for name in SETTINGS_MODULES:
        importlib.import_module(f"{__name__}.{name}")


def _load_all() -> None:
    """Import every runtime module once, so each registers its reader."""
    import importlib

    for name in ("go", "jvm", "v8"):
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":  # a runtime module not written yet is no error; a broken one is
                raise


__all__ = ["READERS", "SETTINGS", "ProcessView", "RuntimeHeap", "RuntimeInfo", "RuntimeReader", "RuntimeSettings",
           "all_readers", "detect_runtimes", "library_settings", "read_deep", "register",
           "register_settings", "remedy", "runtime_settings", "runtime_variants", "settings_prefixes"]
