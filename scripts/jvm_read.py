"""Try the JVM reader on a running process: ``python scripts/jvm_read.py PID [--deep]``.

Prints what ``detect`` and ``read`` (or ``read_deep``) give, and how long the read took.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict

from memgap.runtimes.base import ProcessView
from memgap.runtimes.jvm import READER
from memgap.sources.procfs import ProcReader


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("pid", type=int)
    parser.add_argument("--deep", action="store_true", help="also ask the JVM through jcmd")
    args = parser.parse_args()
    with ProcReader(args.pid) as reader:
        began = time.perf_counter()
        view = ProcessView(args.pid, reader, reader.maps(), os.readlink(f"/proc/{args.pid}/exe"), reader.environ())
        info = READER.detect(view)
        if info is None:
            print("not a JVM (no libjvm.so in its maps)")
            return 1
        heap = READER.read_deep(view, info) if args.deep else READER.read(view, info)
        took = time.perf_counter() - began
    out = asdict(heap)
    out["ranges"] = [{**r, "start": hex(r["start"]), "end": hex(r["end"])} for r in out["ranges"]]
    json.dump(out, sys.stdout, indent=1)
    print(f"\nread in {took * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
