"""Seed 003: a clone whose memory only adds up across all its processes.

The parent spawns ``procs`` workers (the "spawn" start method: each is a fresh
interpreter). Each worker runs import phases, like git-cinnabar's
``import-changesets``, ``import-manifests``, ``import-files``: it allocates and
frees increasingly large buffers, its working set growing phase by phase to
``max_mib`` MiB, while a little bookkeeping from every buffer survives. The
changeset chunks read in the first phase are held until the last one, which
throws them away one by one. Workers mark ``post-import`` when they start,
``post-<phase>`` after each phase and ``idle`` at the end, then rest, so that all of them are alive (and resident)
together; the parent marks its own phases and waits for them.

    python -m memgap.scenarios.multiproc --procs 3 --phases 3 --max-mib 64
"""
from __future__ import annotations

import collections
import gc
import multiprocessing
import random
import sys
import time
from collections.abc import Sequence

from memgap.scenarios import _common

NAME = "multiproc"
KIB = 1024
MIB = 1024 * 1024
PHASE_NAMES = ("import-changesets", "import-manifests", "import-files")
#: bytes allocated in a phase, as a multiple of its working-set target
CHURN = 3


def phase_names(count: int) -> list[str]:
    """``count`` phase names: the three cinnabar ones, then ``import-phase-<k>``."""
    names = list(PHASE_NAMES[:count])
    names += [f"import-phase-{k}" for k in range(len(names) + 1, count + 1)]
    return names


def run_phase(
    index: int,
    phases: int,
    max_mib: int,
    ledger: list[bytes],
    held: collections.deque[bytearray],
    rng: random.Random,
) -> None:
    """Phase ``index`` (1-based) of ``phases``.

    Buffers grow geometrically from a per-phase floor to a per-phase cap
    (later phases handle larger objects, as manifests grow through a
    repository's history); a sliding window keeps the live ones under the
    phase's target, ``max_mib * index / phases``. Each buffer leaves a small
    ledger entry that lives as long as the process.
    """
    target = max(1, max_mib * MIB * index // phases)
    size = float(min(8 * KIB * 4 ** (index - 1), 2 * MIB))
    cap = min(size * 64, 8 * MIB, target)
    window: collections.deque[bytearray] = collections.deque()
    live = 0
    allocated = 0
    first_phase = index == 1
    last_phase = index == phases and phases > 1
    while allocated < CHURN * target:
        n = max(KIB, int(size * rng.uniform(0.75, 1.25)))
        buf = bytearray(n)  # zero-filled: every page touched
        buf[0] = buf[-1] = index
        allocated += n
        ledger.append(bytes(rng.randrange(64, 1536)))
        if first_phase and rng.random() < 0.25:
            held.append(buf)  # changesets, kept until the files are imported
        else:
            window.append(buf)
            live += n
            while live > target and window:
                live -= len(window.popleft())
        if last_phase and held:
            held.popleft()  # throw the held chunks away one by one
        size = min(cap, size * 1.05)
    window.clear()


def worker(number: int, phases: int, max_mib: int, rest: float) -> None:
    """One spawned worker process: its own ``post-import``, a mark per phase, ``idle``."""
    _common.mark("post-import")
    rng = random.Random(300 + number)
    ledger: list[bytes] = []
    held: collections.deque[bytearray] = collections.deque()
    names = phase_names(phases)
    for index, name in enumerate(names, start=1):
        run_phase(index, phases, max_mib, ledger, held, rng)
        gc.collect()
        _common.mark(f"post-{name}")
    held.clear()
    _common.idle(rest)


def main(argv: Sequence[str] | None = None) -> int:
    args = _common.parse_knobs(NAME, argv, bounds={"rest": (0, None)})
    _common.mark("post-import")

    ctx = multiprocessing.get_context("spawn")
    workers = [
        ctx.Process(
            target=worker,
            args=(i, args.phases, args.max_mib, args.rest),
            name=f"memgap-worker-{i}",
        )
        for i in range(args.procs)
    ]
    started = time.monotonic()
    for proc in workers:
        proc.start()
    _common.mark("post-spawn")

    for proc in workers:
        proc.join()
    _common.mark("post-workers")

    _common.idle(args.rest)
    codes = [proc.exitcode for proc in workers]
    _common.result(
        NAME,
        procs=len(workers),
        pids=",".join(str(p.pid) for p in workers),
        exitcodes=",".join(str(c) for c in codes),
        seconds=f"{time.monotonic() - started:.2f}",
    )
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
