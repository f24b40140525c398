"""A Python process that maps the large C++ libraries this machine has (libLLVM-14, libLLVM-15,
libclang-cpp-14) with ctypes, as a PyTorch or LLVM-based program does, then waits.

    python big_libs.py [--grow SECONDS] [--rest SECONDS] [--mib-per-second N]

Prints "ready <pid>" once the libraries are loaded. With --grow, it then allocates
N MiB per second (bytearrays it keeps, touched) for that long, prints "grown", and rests
--rest seconds before exiting; without it, it waits for stdin to close (or forever).
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
import time

WANTED = ("libLLVM-14.so.1", "libLLVM-15.so.1", "libclang-cpp.so.14")


def library_paths() -> list[str]:
    """The big libraries found on this machine (Debian's multiarch folder first)."""
    found = []
    for name in WANTED:
        hits = sorted(glob.glob(f"/usr/lib/x86_64-linux-gnu/{name}") + glob.glob(f"/usr/lib/llvm-*/lib/{name}"))
        if hits:
            found.append(hits[0])
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grow", type=float, default=0.0)
    parser.add_argument("--rest", type=float, default=0.0)
    parser.add_argument("--mib-per-second", type=int, default=40)
    args = parser.parse_args()
    paths = library_paths()
    if not paths:
        sys.exit("big_libs.py: none of libLLVM-14, libLLVM-15, libclang-cpp-14 is installed "
                 "(apt install llvm-14 llvm-15 libclang-cpp14)")
    loaded = [ctypes.CDLL(path) for path in paths]
    print("ready", os.getpid(), " ".join(paths), flush=True)
    if args.grow <= 0:
        sys.stdin.read()
        return
    keep = []
    end = time.monotonic() + args.grow
    while time.monotonic() < end:
        for _ in range(args.mib_per_second // 10):
            block = bytearray(1 << 20)
            block[::4096] = b"\1" * len(block[::4096])
            keep.append(block)
        time.sleep(0.1)
    print("grown", len(keep), "MiB", flush=True)
    time.sleep(args.rest)
    del loaded


if __name__ == "__main__":
    main()
