"""Loaded by Python children of ``memgap run`` and ``memgap lab`` (this folder is
put first on PYTHONPATH).

Under a recording its exit is snapshotted as the interpreter shuts down (read
from outside by ``memgap run`` as the exit waits, or taken in-process where the
program calls memgap.phase() or the lab runs it); with MEMGAP_TRIM_EVERY=SECONDS it starts a periodic
malloc_trim(0), with MEMGAP_TRIMMER=1 memgap.Trimmer (a trim when the process
goes quiet after a burst), with MEMGAP_GC_FREEZE_AT_FORK=1 the collector frozen at
each fork. Then it hands over to any sitecustomize the user already had.
"""


def _install() -> None:
    import os

    if not any(os.environ.get(v) for v in ("MEMGAP_RECORD_DIR", "MEMGAP_TRIM_EVERY", "MEMGAP_TRIMMER",
                                           "MEMGAP_GC_FREEZE_AT_FORK")):
        return
    try:
        from memgap._hook import install
    except Exception:  # noqa: BLE001 - memgap missing in this interpreter: run the program untouched
        return
    install()


def _chain() -> None:
    """Import the user's own sitecustomize, hidden behind this one."""
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    saved_path, saved_module = list(sys.path), sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


_install()
_chain()
