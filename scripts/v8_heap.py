"""Try memgap's V8 reader on a running process: python scripts/v8_heap.py PID (no CLI, no layers)."""
import sys
import time

from memgap.runtimes import ProcessView
from memgap.runtimes.v8 import V8Reader, read_census
from memgap.sources.procfs import ProcReader


def main(pid: int) -> None:
    reader = ProcReader(pid)
    view = ProcessView(pid, reader, reader.maps())
    v8 = V8Reader()
    info = v8.detect(view)
    print(info)
    if info is None:
        return
    t = time.perf_counter()
    heap = v8.read(view, info)
    took = time.perf_counter() - t
    print(f"read in {took * 1000:.1f} ms: {heap.route}")
    for name in ("committed", "in_use", "retained", "released", "limit"):
        print(f"  {name}: {getattr(heap, name)}")
    print("  metadata:", heap.metadata, "settings:", heap.settings)
    for note in heap.notes:
        print("  note:", note)
    for name, space in read_census(reader, view.maps, info.version).totals().items():
        print(f"  {name}: {space}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
