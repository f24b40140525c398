"""Seed 000: a 32-worker decode pool idles far above its Python heap.

A ``ThreadPoolExecutor`` decodes chunks: each task zlib-decompresses a
pre-compressed payload and runs it through numpy temporaries (frombuffer ->
astype -> arithmetic -> reduction), returning one float. Every buffer is freed
when the task ends, yet under glibc's defaults the idle RSS stays far above the
post-import figure: once a freed mmap'd buffer raises the dynamic mmap
threshold, later temporaries of that size come from the per-thread arenas,
whose freed memory stays resident.

    python -m memgap.scenarios.threadpool --threads 32 --chunks 256 --passes 5
"""
from __future__ import annotations

import gc
import sys
import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.random  # numpy loads it lazily: count it as an import, not as session state

from memgap.scenarios import _common

NAME = "threadpool"
#: distinct compressed payloads kept by the session; chunks cycle through them
N_PAYLOADS = 16


def build_payloads(payload_kib: int, count: int = N_PAYLOADS, seed: int = 0) -> list[bytes]:
    """Compressed chunks that decompress to ``payload_kib`` KiB each.

    Small geometric-distributed integers: compressible (to about two fifths)
    but not trivially, like genotype calls. zlib level 4: level 6 made each
    payload 4% smaller for six times the CPU (0.64 s a session against 0.11).
    """
    rng = np.random.default_rng(seed)
    n = payload_kib * 1024
    out = []
    for _ in range(count):
        raw = np.minimum(rng.geometric(0.35, size=n) - 1, 255).astype(np.uint8)
        out.append(zlib.compress(raw.tobytes(), 4))
    return out


def decode(payload: bytes) -> np.ndarray:
    """One task: decompress, run through numpy temporaries, reduce.

    Returns a small (2 KiB) array of per-column sums; it is allocated on the
    worker thread and freed later by the main thread, like a decoded chunk's
    summary handed to a consumer.
    """
    raw = zlib.decompress(payload)
    codes = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 256)
    values = codes.astype(np.float64)           # 8x the payload
    scaled = values * 0.5 + 1.0                  # temporaries
    centered = scaled - scaled.mean(axis=0)
    sums: np.ndarray = np.abs(centered).sum(axis=0)
    return sums


def main(argv: Sequence[str] | None = None) -> int:
    args = _common.parse_knobs(NAME, argv)
    _common.mark("post-import")

    payloads = build_payloads(args.payload_kib)
    pool = ThreadPoolExecutor(max_workers=args.threads, thread_name_prefix="decode")
    _common.mark("post-session")

    checksum = 0.0
    for k in range(1, args.passes + 1):
        futures = [
            pool.submit(decode, payloads[i % len(payloads)]) for i in range(args.chunks)
        ]
        results = [f.result() for f in futures]
        checksum += sum(float(r.sum()) for r in results)
        del futures, results
        gc.collect()
        _common.mark(f"post-pass-{k}")

    threads_alive = sum(1 for t in threading.enumerate() if t.name.startswith("decode"))
    # The pool stays alive through idle, as in the report (an idle executor).
    _common.idle(args.rest)
    _common.result(NAME, threads_alive=threads_alive, checksum=f"{checksum:.6g}")
    pool.shutdown(wait=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
