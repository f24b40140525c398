"""Capture real allocator and /proc outputs of this machine for parser tests.

    python scripts/capture_fixtures.py tests/fixtures/NAME [--threads 8]

Runs a small thread-pool workload in this process, then writes, within the
same second: malloc_info.xml, debugmallocstats.txt, proc_self_{status,maps,
smaps,smaps_rollup}.txt and meta.json (versions, mallinfo2).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from memgap.sources.glibc import glibc_malloc
from memgap.sources.pymalloc import capture_debugmallocstats


def work(i: int) -> int:
    keep = [bytearray(16384 + (i * 37) % 20000) for _ in range(200)]
    return len(keep[::4])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(work, range(400)))
        os.makedirs(args.out, exist_ok=True)
        libc = glibc_malloc()
        mallinfo2 = libc.mallinfo2().__dict__  # next to malloc_info: both see the same heap
        files = {
            "malloc_info.xml": libc.malloc_info_xml(),
            "debugmallocstats.txt": capture_debugmallocstats(),
        }
        for name in ("status", "maps", "smaps", "smaps_rollup"):
            with open(f"/proc/self/{name}") as fh:
                files[f"proc_self_{name}.txt"] = fh.read()
        meta = {"python": sys.version, "glibc": platform.libc_ver(), "cpus": os.cpu_count(),
                "threads": args.threads, "mallinfo2": mallinfo2}
    for name, text in files.items():
        with open(os.path.join(args.out, name), "w") as fh:
            fh.write(text)
    with open(os.path.join(args.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)


if __name__ == "__main__":
    main()
