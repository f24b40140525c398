"""Attach to a busy process 100 times in a row, from outside and with --deep (gdb).

The target: a C program whose 4 threads malloc and free blocks of 1-200 KiB
all the time while its main thread prints a counter every 10 ms. Per round,
`memgap inspect PID --json -` (outside: /proc reads only) then
`memgap inspect PID --deep --json -` (gdb calls malloc_info inside it). After
every attach: the target must be alive and no thread stopped (state t/T). At the
end: its counter must have gone on with no gap or repeat, and its stderr must be
empty (what it printed is unchanged by the attaches).

    python benchmarks/stress_attach.py [--rounds 100]

Prints the latencies (median, max) of each kind and the checks.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void *churn(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    char *held[64] = {0};
    for (;;) {
        int i = rand_r(&seed) % 64;
        free(held[i]);
        size_t n = 1024 + rand_r(&seed) % (200 * 1024);
        held[i] = malloc(n);
        memset(held[i], 1, n < 4096 ? n : 4096);
    }
    return NULL;
}
int main(void) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, (void *)i);
    printf("ready\n");
    fflush(stdout);
    for (long n = 0;; n++) { printf("%ld\n", n); fflush(stdout); usleep(10000); }
}
"""


def states(pid: int) -> list[str]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as fh:
            out.append(fh.read().rsplit(")", 1)[1].split()[0])
    return out


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="memgap-stress-")
    src, exe = os.path.join(work, "busy.c"), os.path.join(work, "busy")
    with open(src, "w") as fh:
        fh.write(TARGET_C)
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-pthread", "-o", exe, src], check=True)
    out_path, err_path = os.path.join(work, "out"), os.path.join(work, "err")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        target = subprocess.Popen([exe], stdout=out, stderr=err, start_new_session=True)
    while "ready" not in _read(out_path):
        time.sleep(0.01)
    latencies: dict[str, list[float]] = {"outside": [], "deep": []}
    failures = []
    try:
        for _ in range(args.rounds):
            for kind, extra in (("outside", []), ("deep", ["--deep"])):
                started = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "memgap", "inspect", str(target.pid), *extra,
                                       "--json", "-"], capture_output=True, text=True)
                latencies[kind].append(time.perf_counter() - started)
                if proc.returncode != 0:
                    failures.append(f"{kind}: exit {proc.returncode}: {proc.stderr.strip()}")
                if target.poll() is not None:
                    failures.append(f"{kind}: the target died ({target.returncode})")
                    break
                stopped = [s for s in states(target.pid) if s in "tT"]
                if stopped:
                    failures.append(f"{kind}: left with stopped threads {stopped}")
            if target.poll() is not None:
                break
    finally:
        target.send_signal(signal.SIGKILL)
        target.wait()
    lines = _read(out_path).split("\n")
    numbers = [int(x) for x in lines[lines.index("ready") + 1:-1]]
    continuous = numbers == list(range(len(numbers)))
    stderr = _read(err_path)
    for kind, values in latencies.items():
        print(f"{kind}: {len(values)} attaches, median {statistics.median(values):.3f} s, max {max(values):.3f} s")
    print(f"target alive throughout: {not any('died' in f for f in failures)}; "
          f"never left stopped: {not any('stopped' in f for f in failures)}; "
          f"counter continuous over {len(numbers)} lines: {continuous}; stderr empty: {not stderr}")
    for failure in failures[:10]:
        print("FAILED", failure)
    shutil.rmtree(work)
    return 0 if not failures and continuous and not stderr else 1


if __name__ == "__main__":
    sys.exit(main())
