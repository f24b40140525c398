"""The lines that apply a lab's recommendation where the program is deployed.

Nothing in them is a path of the machine the lab ran on: a trimmer in a Python
program comes from memgap's ``memgap-activate.pth`` (installed with memgap; it
acts only when a MEMGAP_ variable asks), in another program from memgap's native
agent linked to a fixed path by a setup line; for users who will not add a
dependency, the few lines of plain Python that do what was measured.
"""
from __future__ import annotations

from memgap.allocators.catalog import CATALOGUE, preloaded
from memgap.allocators.variants import Variant
from memgap.documents.records import RemedyLines
from memgap.record.envnames import TRIM_AFTER_ENV, TRIMMER_ENV

AGENT_LINK = "/usr/local/lib/libmemgap-agent.so"  # where the setup line links the agent, on the target

PLAIN_TRIM = """\
import ctypes
# glibc's malloc_trim(0): call it where the program goes idle (after a burst,
# a batch, a request wave): it gives back the free pages malloc holds
ctypes.CDLL("libc.so.6").malloc_trim(0)"""

PLAIN_TRIM_EVERY = """\
import ctypes, threading, time
def _trim_every(seconds):  # glibc's malloc_trim(0) every few seconds, from a daemon thread
    libc = ctypes.CDLL("libc.so.6")
    while True:
        time.sleep(seconds)
        libc.malloc_trim(0)
threading.Thread(target=_trim_every, args=({seconds},), daemon=True).start()"""


PLAIN_GC_FREEZE = (
    "import gc, os\n"
    "# early in the parent, before it builds what its workers will share: no collections there\n"
    "gc.disable()\n"
    "# right before each fork, every tracked object leaves the collector's reach; the child collects again\n"
    "os.register_at_fork(before=gc.freeze, after_in_child=gc.enable)")
GUNICORN_GC_FREEZE = ("gunicorn (with --preload): in gunicorn.conf.py, `import gc; gc.disable()` at the top, "
                      "`def pre_fork(server, worker): gc.freeze()` and `def post_fork(server, worker): gc.enable()`; "
                      "uWSGI and Celery prefork: the same three calls at start, before each fork and in each worker")


def _plain_python(variant: Variant) -> str:
    """The same remedy in plain Python, where one exists (not for pymalloc's pool release)."""
    if variant.pymalloc_release or not (variant.trim or variant.gc_freeze):
        return ""
    trim = ""
    if variant.trim.startswith("every:"):
        trim = PLAIN_TRIM_EVERY.replace("{seconds}", variant.trim[len("every:"):])
    elif variant.trim:
        trim = PLAIN_TRIM
    return "\n".join(filter(None, [PLAIN_GC_FREEZE if variant.gc_freeze else "", trim]))


def recommendation_lines(variant: Variant, python: bool = True) -> RemedyLines:
    """What applies ``variant``: the environment, setup commands, notes, and plain Python
    without memgap where that can do it (``report.remedy`` renders them for a shell, a
    Dockerfile, systemd and Python).

    ``python``: the workload is a Python program (a trimmer comes from memgap's
    .pth file in its environment); otherwise from memgap's native agent.
    """
    env = variant.env()
    setup: list[str] = []
    notes: list[str] = []
    if env.pop(TRIM_AFTER_ENV, None):
        # An unmodified program marks no idle for memgap: the idle trimmer is what applies the trim.
        env[TRIMMER_ENV] = "1"
        notes.append("trim=idle was measured as one malloc_trim(0) at the program's idle (the lab's table says how "
                     "idle was found); deployed, memgap's idle trimmer (MEMGAP_TRIMMER=1) trims once the program "
                     "has been quiet for 2 s after a burst (the trim=quiet variants measure that); the plain-Python "
                     "lines do the measured trim where you call them")
    if variant.trim == "quiet":
        notes.append("what was measured is memgap's idle trimmer (MEMGAP_TRIMMER=1); the plain-Python lines were "
                     "not measured: they do one such trim where you call them")
    if variant.gc_freeze:
        notes.append("what was measured is memgap's bootstrap freezing the collector at each fork "
                     "(MEMGAP_GC_FREEZE_AT_FORK=1); the plain-Python lines do the same in the program; "
                     + GUNICORN_GC_FREEZE)
    if (variant.trim or variant.gc_freeze) and python:
        setup.append("pip install memgap   # into the program's own environment")
        notes.append("memgap's memgap-activate.pth (installed with it) acts in any Python of that environment "
                     "where MEMGAP_TRIMMER, MEMGAP_TRIM_EVERY, MEMGAP_GC_FREEZE_AT_FORK or MEMGAP_RECORD_DIR is "
                     "set, and does nothing otherwise")
    elif variant.trim:
        from memgap.agent import AGENT_ENV

        setup.append(f'ln -sf "$(memgap agent --path)" {AGENT_LINK}   # after pip install memgap')
        env["LD_PRELOAD"] = preloaded(AGENT_LINK, env.get("LD_PRELOAD", ""))
        env[AGENT_ENV] = "on"
    if variant.pymalloc_release:
        notes.append("MEMGAP_PYMALLOC_RELEASE=1: memgap's trims also drop the pages of pymalloc's empty pools, "
                     "by editing their headers in place with the GIL held (CPython 3.10-3.13 with a GIL; "
                     "see memgap.release_pymalloc); elsewhere the trims skip it")
    if variant.runtime:
        from memgap.runtimes import runtime_settings

        for head in variant.runtime:
            settings = runtime_settings(head)
            notes.extend(settings.notes if settings else ())
    if variant.library:
        setup.append(f"apt-get update && apt-get install -y {CATALOGUE[variant.allocator].package}   # Debian, Ubuntu")
        notes.append(f"{variant.library} is where Debian's package puts it; elsewhere use its path there")
    return RemedyLines(env, setup, _plain_python(variant), notes)
