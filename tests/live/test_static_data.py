"""Libraries' static data (.bss), issue 31, on real programs that do not import memgap: a C program's 64 MiB
static array (``programs/static_data.c``), a shared library with a 48 MiB static buffer loaded by a Python
process with ctypes (as an extension module is), the same library deleted from disk once loaded (its file
then unread: the range from the maps, said as likely), and the layers of a plain Python process and of
``programs/witness.c`` otherwise as before. Then issue 31 item 4: a library that embeds a prefixed jemalloc,
loaded and never allocated through, is said present, not holding memory. The unit half (the program headers
parsed, the ranges by hand, the captured PyTorch maps): ``tests/unit/test_static_data_units.py``.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import child_env
from helpers import MiB, build_c, check_adds_up, memgap, the_finding

# a 48 MiB zero-initialised buffer: the library's .bss; bss_touch writes the first n bytes' pages
LIBRARY_C = """
#include <stddef.h>
static char buffer[48 << 20];
size_t bss_touch(size_t n) {
    for (size_t i = 0; i < n && i < sizeof buffer; i += 4096) buffer[i] = 1;
    return (size_t)buffer;
}
"""
# a Python process that loads the library, touches its buffer, says "ready ADDRESS" and rests until stdin closes;
# with "delete", the library's file is removed once it is loaded; with "inside", it prints its own snapshot
HOST_PY = """
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
lib.bss_touch.restype = ctypes.c_size_t
address = lib.bss_touch(ctypes.c_size_t(int(sys.argv[2])))
if "delete" in sys.argv[3:]:
    os.unlink(sys.argv[1])
if "inside" in sys.argv[3:]:
    import memgap
    snap = memgap.snapshot()
    print(json.dumps({"layers": {k: v.resident for k, v in snap.layers.items()}, "unexplained": snap.unexplained,
                      "static": snap.layers["static_data"].detail}), flush=True)
print("ready", address, flush=True)
sys.stdin.read()
""".replace("import ctypes, os, sys", "import ctypes, json, os, sys")


def within(value, touched, share=0.01):
    return abs(value - touched) <= share * touched


class Resting:
    """A program that prints "ready ..." (after any lines of its own) and rests until its stdin closes."""

    def __init__(self, cmd, env=None):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.lines = []
        for line in self.proc.stdout:
            if line.startswith("ready"):
                self.ready = line.split()
                break
            self.lines.append(line)
        else:
            raise AssertionError((cmd, "no ready", self.proc.poll(), self.lines))
        self._wait_blocked_in_read()

    def _wait_blocked_in_read(self, timeout=10.0):
        """At rest only once blocked reading its stdin: Python's ``sys.stdin.read()`` mallocs its 8 KiB buffer
        after "ready" is printed (a snapshot before it saw 8,240 bytes still free that the next saw in use)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(f"/proc/{self.proc.pid}/syscall") as fh:
                if fh.read().split()[0] == "0":  # read(2), x86-64's number 0: blocked in it
                    return
            time.sleep(0.01)
        raise AssertionError(("not blocked in read", self.proc.pid))

    def inspect(self, *args):
        out = memgap("inspect", str(self.proc.pid), *args)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    def doc(self):
        return json.loads(self.inspect("--json", "-", "--regions"))

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def static_exe(tmp_path_factory):
    return build_c(tmp_path_factory, "static_data")


@pytest.fixture(scope="module")
def bss_library(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc) to build a library")
    where = tmp_path_factory.mktemp("bss_library")
    (where / "bss.c").write_text(LIBRARY_C)
    lib = str(where / "libbss.so")
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", lib, str(where / "bss.c")], check=True)
    return lib


def _static(doc):
    layer = doc["layers"]["static_data"]
    return layer, {o["path"]: o for o in layer["detail"]["largest"]}


@pytest.mark.parametrize("touched_mib", [64, 24])
def test_a_programs_static_array_is_its_static_data(static_exe, touched_mib):
    held = Resting([static_exe, str(touched_mib)])
    try:
        doc, text = held.doc(), held.inspect()
    finally:
        held.close()
    address, size, touched = int(held.ready[1], 16), int(held.ready[2]), int(held.ready[3])
    assert (size, touched) == (64 * MiB, touched_mib * MiB)
    layer, objects = _static(doc)
    # the array's pages, but for its first one where it shares a page with the program's initialised data
    assert within(objects[static_exe]["bytes"], touched) and objects[static_exe]["likely"] == 0, objects
    assert layer["detail"]["largest"][0]["path"] == static_exe
    assert doc["layers"]["other_anon"]["resident"] < 2 * MiB, doc["layers"]["other_anon"]  # 64.1 MiB before
    check_adds_up(doc)  # the layers against VmRSS and against the kernel's anonymous/file split
    # the labelled map: the array lies in the program's static-data regions, which lie in its 64 MiB and a page
    mine = [r for r in doc["regions"] if r["owner"] == "static-data" and r["path"] == static_exe]
    assert mine and all(address - 4096 <= r["start"] and r["end"] <= address + size + 4096 for r in mine), mine
    assert sum(r["resident"] for r in mine) == objects[static_exe]["bytes"]
    assert "static data (.bss) of its objects" in text, text
    row = next(line for line in text.splitlines() if f"│ {static_exe} " in line)  # the table of objects
    assert f"│ {objects[static_exe]['bytes'] / MiB:.1f} │" in " ".join(row.split()), row


def test_a_libraries_static_buffer_touched_from_python(bss_library):
    touched = 40 * MiB
    held = Resting([sys.executable, "-c", HOST_PY, bss_library, str(touched)], env=child_env())
    try:
        doc, regions = held.doc(), held.inspect("--regions")
    finally:
        held.close()
    _, objects = _static(doc)
    assert within(objects[bss_library]["bytes"], touched) and objects[bss_library]["likely"] == 0, objects
    assert doc["layers"]["other_anon"]["resident"] < touched / 4, doc["layers"]["other_anon"]
    check_adds_up(doc)
    lines = [line for line in regions.splitlines() if line.endswith(bss_library) and "static-data" in line]
    assert lines, regions[-3000:]


def test_static_data_read_in_process_too(bss_library):
    touched = 40 * MiB
    held = Resting([sys.executable, "-c", HOST_PY, bss_library, str(touched), "inside"], env=child_env())
    held.close()
    own = json.loads(held.lines[-1])
    largest = {o["path"]: o["bytes"] for o in own["static"]["largest"]}
    assert within(largest[bss_library], touched), own["static"]
    assert abs(own["unexplained"]) < 0.05 * sum(v or 0 for v in own["layers"].values())


def test_a_library_deleted_once_loaded_is_placed_from_the_maps_as_likely(bss_library, tmp_path):
    lib = str(tmp_path / "libbss_gone.so")
    shutil.copy(bss_library, lib)
    touched = 40 * MiB
    held = Resting([sys.executable, "-c", HOST_PY, lib, str(touched), "delete"], env=child_env())
    try:
        doc = held.doc()
    finally:
        held.close()
    layer, objects = _static(doc)
    gone = f"{lib} (deleted)"  # as maps names it: its program headers cannot be read now
    assert within(objects[gone]["bytes"], touched) and objects[gone]["likely"] == objects[gone]["bytes"], objects
    assert layer["detail"]["likely"] >= objects[gone]["bytes"]
    assert "the ELF file not read" in layer["derivation"] and "maps" in layer["source"]
    # its anonymous pages: the static data's (its file's own pages, and their private copies, stay theirs)
    assert {r["owner"] for r in doc["regions"] if r["path"] == gone} - {"file", "file-cow"} == {"static-likely"}
    check_adds_up(doc)


def _both_ways(pid, monkeypatch):
    """The snapshot from outside as memgap takes it, and again with no object's static data placed (memgap
    before issue 31), the process at rest between them."""
    from memgap.explain import snapshot as snapshot_module
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

    options = SnapshotOptions(regions=False, agent=False)
    now = snapshot_pid(pid, options)
    with monkeypatch.context() as patched:
        patched.setattr(snapshot_module, "read_static_ranges", lambda maps, root: [])
        before = snapshot_pid(pid, options)
    return {k: v.resident for k, v in now.layers.items()}, {k: v.resident for k, v in before.layers.items()}


@pytest.mark.parametrize("program", ["python", "witness"])
def test_other_layers_stay_as_they_were(program, witness_exe, monkeypatch):
    cmd = [sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"] \
        if program == "python" else [witness_exe]
    held = Resting(cmd, env=child_env())
    try:
        now, before = _both_ways(held.proc.pid, monkeypatch)
    finally:
        held.close()
    static = now.pop("static_data")
    assert static > 0 and "static_data" in before and before.pop("static_data") == 0  # libc's .bss at least
    assert before.pop("other_anon") - now.pop("other_anon") == static, (static, now, before)
    assert now == before


def test_an_allocator_in_a_librarys_code_is_present_not_holding_memory(je_prefixed_exe, tmp_path):
    """A library with jemalloc linked in under the ``je_`` prefix (the renamed archive conftest builds), loaded
    by a Python process with ctypes and never allocated through: named beside glibc's malloc as present, and
    no finding or note says it holds memory."""
    cc = shutil.which("gcc") or shutil.which("cc")
    archive = os.path.join(os.path.dirname(je_prefixed_exe[0]), "libjemalloc_je.a")
    lib = str(tmp_path / "libje_inside.so")
    subprocess.run([cc, "-shared", "-o", lib, "-Wl,--whole-archive", archive, "-Wl,--no-whole-archive",
                    "-lstdc++", "-lpthread", "-lm", "-ldl"], check=True)
    # jemalloc takes its thread-local storage from the static TLS block: a library loaded after start-up
    # needs glibc's reserve for it raised
    env = child_env(GLIBC_TUNABLES="glibc.rtld.optional_static_tls=4096")
    held = Resting([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('ready', flush=True);"
                    " sys.stdin.read()", lib], env=env)
    try:
        doc, text = held.doc(), held.inspect()
    finally:
        held.close()
    beside = [(f["name"], f["library"], f["prefix"]) for f in doc["allocator"]["found"] if not f["serves_malloc"]]
    assert beside == [("jemalloc", lib, "je_")] and doc["allocator"]["name"] == "glibc", doc["allocator"]
    f = the_finding(doc["findings"], "second-allocator")
    said = " ".join([f["summary"], *f["evidence"]])
    assert "present" in f["summary"] and "no memory of it measured" in f["summary"], f
    assert f"its code found in {lib}" in said and "other_anon" not in said and "its memory is" not in said, f
    note = doc["layers"]["other_anon"]["note"]
    assert "present" in note and "counted under other anonymous" not in note, note
    assert "another allocator beside glibc" in " ".join(text.split())
