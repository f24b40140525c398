"""A GPU process's host memory named (issue 33), on the captured PyTorch processes (``fixtures/torch-2.11-cuda13/``):
their smaps classify the mappings (the captures hold no pagemap: each mapping's pages are laid out from smaps'
own counts), then the labelling and the attribution run as on a live process. The live half (a process with
shared anonymous memory but no CUDA is not named pinned): ``tests/live/test_gpu.py``.
"""
import os

import pytest

from conftest import HERE
from memgap.allocators.measured import Measurements
from memgap.explain.attribution import attribute
from memgap.explain.snapshot import label_regions
from memgap.sources import procfs
from memgap.sources.gpu_maps import GPU_DRIVER, PINNED_LIKELY, shared_owner, uses_cuda
from memgap.sources.memory_map import MappedPages, MemoryMap
from memgap.sources.procfs import PAGE_SIZE, Mapping, PageCounts
from memgap.sources.resident_map import ResidentMap

MiB = 1 << 20
TORCH = os.path.join(HERE, "fixtures", "torch-2.11-cuda13")


class NoMemory:
    """A captured process: no memory to read, no pagemap (the layout comes from smaps)."""

    def read_memory(self, address, size):
        return None

    def pagemap(self, start, end):
        raise AssertionError("the captures hold no pagemap")


@pytest.fixture(autouse=True)
def no_object_search(monkeypatch):
    """The captures hold no memory: the search for mmapped chunks and pymalloc arenas in anonymous memory finds
    nothing and leaves every resident page unclaimed, as it does reading None, without its page-by-page walk."""
    import memgap.explain.snapshot as snapshot

    monkeypatch.setattr(snapshot, "find_anon_objects",
                        lambda reader, rest, res, *sizes: ([], sum(res.resident(lo, hi) for lo, hi in rest)))


def _captured(name, drop=()):
    """The capture's memory map laid out from smaps (each mapping's resident pages first, its private pages
    first among them), its smaps PSS set, and its status; mappings whose path holds a word of ``drop`` left out,
    and, as memgap's reader leaves them, the kernel's special mappings ([vdso]: 4 KiB of VmRSS) and PROT_NONE ones."""
    with open(os.path.join(TORCH, name, "proc_smaps.txt")) as f:
        text = f.read()
    with open(os.path.join(TORCH, name, "proc_status.txt")) as f:
        status = procfs.parse_status(f.read())
    entries = [e for e in procfs.parse_smaps(text) if not any(w in e.mapping.path for w in drop)]
    res, mapped = ResidentMap(NoMemory()), []
    for e in entries:
        m = e.mapping
        if m.is_special or m.perms[:3] == "---":
            continue
        pages, present = (m.end - m.start) // PAGE_SIZE, e.get("Rss") // PAGE_SIZE
        private = (e.get("Private_Clean") + e.get("Private_Dirty")) // PAGE_SIZE
        anon = e.get("Anonymous") // PAGE_SIZE
        res.add(m.start, m.end, bytes([1] * present + [0] * (pages - present)),
                bytes([1] * private + [0] * (pages - private)))
        mapped.append(MappedPages(m, PageCounts(present, anon, 0, private, min(anon, private))))
    res.set_shares(procfs.parse_smaps_pss(text))
    return MemoryMap(mapped, res), status, entries


def _layers(name, drop=()):
    memmap, status, entries = _captured(name, drop)
    regions = label_regions(NoMemory(), memmap, None, None, None)
    layers, unexplained = attribute(Measurements(rss=int(status["VmRSS"]), regions=regions))
    vdso = sum(e.get("Rss") for e in entries if e.mapping.is_special)
    dropped = int(status["VmRSS"]) - sum(e.get("Rss") for e in entries)  # the mappings left out of the capture
    return layers, unexplained - vdso - dropped, status, entries


def _rss(entries, test):
    return sum(e.get("Rss") for e in entries if test(e.mapping.path))


def test_the_cuda_process_names_its_pinned_memory_and_the_drivers_mappings():
    layers, unexplained, status, entries = _layers("cuda")
    assert sum(e.get("Rss") for e in entries) == status["VmRSS"]  # smaps' counts hold every resident byte
    zero = _rss(entries, lambda p: p == "/dev/zero (deleted)")
    driver = _rss(entries, lambda p: p.startswith("/dev/nvidia"))
    assert zero == status["RssShmem"] == 1032 * MiB  # the 1 GiB pool and CUDA's 8 MiB of staging buffers
    assert 70 * MiB < driver < 73 * MiB  # issue 33: "~71 MiB"
    pinned, gpu = layers["pinned_host"], layers["gpu_driver"]
    assert (pinned.resident, pinned.pss, pinned.private) == (zero, zero, zero)
    assert (gpu.resident, gpu.pss) == (driver, driver)
    assert pinned.detail["mappings"] == 5 and pinned.detail["confidence"].startswith("likely")
    assert gpu.detail["confidence"].startswith("certain")
    assert gpu.detail["devices"] == {"/dev/nvidiactl": 70 * MiB, "/dev/nvidia-uvm": 2 * MiB, "/dev/nvidia0": 0}
    assert layers["shared_memory"].resident == 0
    # every byte in exactly one layer: the layers add up to VmRSS (but [vdso]'s page, as today)
    assert unexplained == 0


def test_without_cudas_library_shared_anonymous_memory_stays_shared_memory():
    layers, unexplained, _, entries = _layers("cuda", drop=("libcuda.so",))
    zero = _rss(entries, lambda p: p == "/dev/zero (deleted)")
    assert layers["shared_memory"].resident == zero and layers["pinned_host"].resident == 0
    assert layers["gpu_driver"].resident > 70 * MiB  # the device files are the driver's whoever maps them
    assert unexplained == 0


def test_a_process_that_only_loaded_cuda_shows_no_gpu_layer():
    # `import torch` loads libcuda.so but opens no context: no device mapped, no pinned memory, no new layer
    layers, unexplained, _, entries = _layers("cpu")
    assert "libcuda.so.580.159.04" in " ".join(e.mapping.path for e in entries)
    assert "gpu_driver" not in layers and "pinned_host" not in layers
    assert unexplained == 0


def _recorded(layers):
    """A run of one process whose snapshot holds ``layers``, as a recording keeps them (JSON)."""
    from dataclasses import asdict

    from memgap.documents.records import ProcessRecord, RunDocument

    return RunDocument([ProcessRecord(1, [{"phase": "quiet", "allocator": {"name": "glibc"},
                                           "layers": {name: asdict(layer) for name, layer in layers.items()}}])])


def test_the_lab_tries_pytorchs_cache_settings_where_a_cuda_context_maps_its_cuda_build():
    """The captured CUDA process: its gpu_driver layer names the objects that say CUDA, PyTorch's among them, so
    the lab's default set adds expandable segments; the CPU-only one maps them too (``import torch`` of a CUDA
    wheel loads libc10_cuda.so, libtorch_cuda.so and libcuda.so) but opens no context: nothing is added."""
    from memgap.lab.choose import choose, run_libraries

    cuda, _, _, _ = _layers("cuda")
    assert cuda["gpu_driver"].detail["libraries"] == ["libc10_cuda.so", "libcuda.so.580.159.04", "libcudart.so.13",
                                                      "libtorch_cuda.so"]
    run = _recorded(cuda)
    assert run_libraries(run) == set(cuda["gpu_driver"].detail["libraries"])
    (got,) = choose([], {"glibc"}, python=True, libraries=run_libraries(run))
    assert got.spec == "torch:expandable_segments=True"
    assert got.reason == ("libc10_cuda.so is PyTorch's CUDA build, and the process has a CUDA context: its caching "
                          "allocator's own settings")
    cpu, _, _, entries = _layers("cpu")
    mapped = {os.path.basename(e.mapping.path) for e in entries}
    assert {"libc10_cuda.so", "libtorch_cuda.so", "libcuda.so.580.159.04"} <= mapped  # loaded, no context
    assert run_libraries(_recorded(cpu)) == set() and choose([], {"glibc"}, True, libraries=set()) == []


def test_the_caches_finding_adds_expandable_segments_and_names_it():
    from memgap.diagnose.gpu import gpu_findings
    from memgap.documents.gpu import GpuMemory
    from memgap.lab.choose import choose
    from memgap.sources.torch_cuda import cache_from_stats

    held = cache_from_stats({"allocated_bytes.all.current": 1 << 30, "reserved_bytes.all.current": 3 << 30,
                             "inactive_split_bytes.all.current": 512 * MiB, "segment.all.current": 40}, None)
    (finding,) = gpu_findings(_snapshot({}, 1 << 30, GpuMemory(torch=held)))
    assert "`memgap lab` measures it as torch:expandable_segments=True" in finding.remedy
    (got,) = choose([finding], {"glibc"}, python=True)
    assert got.spec == "torch:expandable_segments=True"
    assert got.reason.startswith("finding torch-cache-retained: PyTorch's CUDA cache holds 2048.0 MiB")


def _m(path, perms="rw-s"):
    return Mapping(0x1000, 0x2000, perms, 0, "00:01", 1 if path.startswith("/") else 0, path)


@pytest.mark.parametrize("paths, cuda", [
    (["/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "/dev/nvidiactl"], True),
    (["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/dev/nvidia0"], True),
    (["/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"], False),  # loaded, no context
    (["/dev/nvidiactl", "/usr/lib/libcudart.so.13"], False),       # the runtime without the driver's library
    (["/dev/zero (deleted)"], False),
])
def test_uses_cuda_needs_the_drivers_library_and_a_device_mapped(paths, cuda):
    assert uses_cuda([_m(p) for p in paths]) is cuda


@pytest.mark.parametrize("path, cuda, owner", [
    ("/dev/zero (deleted)", True, PINNED_LIKELY), ("[anon_shmem:buf]", True, PINNED_LIKELY),
    ("/dev/zero (deleted)", False, "shmem"), ("/dev/shm/pool", True, "shmem"), ("/memfd:x (deleted)", True, "shmem"),
    ("/SYSV00000000 (deleted)", True, "shmem"),
])
def test_only_shared_anonymous_memory_may_be_pinned(path, cuda, owner):
    assert shared_owner(path, cuda) == owner != GPU_DRIVER


# --- the pinned memory's finding, on the captured process's layers ---

def _snapshot(layers, rss, gpu=None):
    from memgap.documents.allocator import AllocatorInfo
    from memgap.documents.snapshot import Snapshot

    return Snapshot(pid=458, time=0.0, rss=rss, layers=layers, unexplained=0, allocator=AllocatorInfo("glibc"),
                    route="outside", gpu=gpu)


def test_the_captured_pinned_memory_is_a_finding_said_as_likely():
    from memgap.diagnose.findings import diagnose

    layers, _, status, _ = _layers("cuda")
    found = [f for f in diagnose(_snapshot(layers, int(status["VmRSS"]))) if f.code == "pinned-host-memory"]
    assert len(found) == 1
    assert found[0].summary.startswith("likely pinned host memory: 1032.0 MiB, 36% of its RSS")
    assert "likely" in found[0].evidence[0]


def test_pinned_memory_read_in_the_process_is_said_with_pytorchs_own_count():
    from memgap.diagnose.findings import diagnose
    from memgap.documents.gpu import GpuMemory
    from memgap.sources.torch_cuda import cache_from_stats

    layers, _, status, _ = _layers("cuda")
    inside = _fixture_json("cuda", "inside.json")
    gpu = GpuMemory(torch=cache_from_stats(inside["memory_stats"], None, inside["host_memory_stats"]))
    (found,) = [f for f in diagnose(_snapshot(layers, int(status["VmRSS"]), gpu)) if f.code == "pinned-host-memory"]
    assert found.summary.startswith("pinned host memory: 1032.0 MiB, PyTorch's pinned pool 1024.0 MiB of it, 36% "
                                    "of its RSS")
    assert "allocated_bytes.current 1073741824" in found.evidence[1] and "likely" in found.evidence[0]


def test_pinned_memory_below_the_floor_or_the_share_is_no_finding():
    from memgap.diagnose.gpu import gpu_findings
    from memgap.documents.snapshot import Layer

    def pinned(resident, rss):
        return gpu_findings(_snapshot({"pinned_host": Layer("pinned_host", resident)}, rss))

    assert pinned(300 * MiB, 1000 * MiB) and not pinned(100 * MiB, 1000 * MiB)  # 30%, 10% of RSS
    assert not pinned(15 * MiB, 20 * MiB)  # most of RSS, under 16 MiB


# --- NVML's records, parsed apart from the calls; the library absent here ---

def test_nvml_records_parse_in_both_layouts():
    import struct

    from memgap.sources.nvml import NOT_AVAILABLE, RECORD_V1, RECORD_V2, decode_text, parse_processes

    v2 = struct.pack("<I4xQII", 458, 4842 * MiB, 0xFFFFFFFF, 0xFFFFFFFF) + \
        struct.pack("<I4xQII", 9, NOT_AVAILABLE, 0, 0)
    assert parse_processes(v2, 2, RECORD_V2) == {458: 4842 * MiB, 9: None}
    assert parse_processes(v2, 1, RECORD_V2) == {458: 4842 * MiB}  # only the count NVML wrote
    assert parse_processes(v2, 5, RECORD_V2) == {458: 4842 * MiB, 9: None}  # never past the buffer
    v1 = struct.pack("<I4xQ", 458, MiB) + struct.pack("<I4xQ", 458, 3 * MiB)  # listed twice: its larger figure
    assert parse_processes(v1, 2, RECORD_V1) == {458: 3 * MiB}
    assert decode_text(b"NVIDIA H200\0\xff\xff") == "NVIDIA H200"


def test_without_the_drivers_library_nothing_is_read_and_the_failed_load_is_remembered():
    from memgap.sources import nvml

    nvml._nvml.cache_clear()
    here = os.getpid()
    assert nvml.gpu_memory([here]) == {} and nvml.device_memory([here]) == {}  # this process has no GPU context
    assert nvml.gpu_memory([here, 1]) == {}
    assert nvml._nvml.cache_info().misses == 1  # one dlopen, however many asks
    assert nvml.gpu_memory([here], only_loaded=True) == {}  # reading its own process: only a library it loaded
    with open("/proc/self/maps") as fh:
        assert "libnvidia-ml" not in fh.read()


# --- PyTorch's caching allocator: the arithmetic, on the captured figures ---

def _fixture_json(*path):
    import json

    with open(os.path.join(TORCH, *path)) as fh:
        return json.load(fh)


class FakeCuda:
    """torch.cuda as the figures need it: initialised or not, its devices' memory_stats()."""

    def __init__(self, stats, initialised=True, host=None):
        self.stats, self.initialised, self.host = stats, initialised, host

    def is_initialized(self):
        return self.initialised

    def device_count(self):
        return len(self.stats)

    def memory_stats(self, device):
        return self.stats[device]

    def host_memory_stats(self):
        return self.host


def test_the_caching_allocator_from_the_captured_process():
    import sys
    import types

    from memgap.documents.gpu import GpuDevice, GpuMemory
    from memgap.sources.torch_cuda import torch_cache

    inside = _fixture_json("cuda", "inside.json")
    torch = types.SimpleNamespace(cuda=FakeCuda([inside["memory_stats"]], host=inside["host_memory_stats"]))
    gpu = GpuMemory([GpuDevice(0, "NVIDIA H200", "GPU-x", inside["nvml_process_used"])])
    cache = torch_cache(gpu, {"torch": torch})
    assert (cache.allocated, cache.reserved, cache.inactive_split, cache.segments) == (4462739456, 4462739456, 0, 4)
    assert cache.context_and_libraries == 5077204992 - 4462739456  # 586 MiB: the context, cuBLAS's kernels
    assert (cache.pinned_held, cache.pinned_active) == (1 << 30, 1 << 30)  # the 1 GiB pin_memory() tensor
    older = torch_cache(gpu, {"torch": types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_initialized=lambda: True, device_count=lambda: 1, memory_stats=lambda device: inside["memory_stats"]))})
    assert older.reserved == cache.reserved and older.pinned_held is None  # a torch with no host_memory_stats()
    assert torch_cache(gpu, {"torch": types.SimpleNamespace(cuda=FakeCuda([{}], initialised=False))}) is None
    assert torch_cache(gpu, {}) is None  # no torch imported: none imported here either
    had = "torch" in sys.modules
    assert torch_cache(None) is None and ("torch" in sys.modules) == had


def test_the_caches_finding_fires_where_it_holds_much_more_than_its_tensors():
    from memgap.diagnose.gpu import EXPANDABLE, gpu_findings
    from memgap.documents.gpu import GpuMemory
    from memgap.sources.torch_cuda import cache_from_stats

    captured = _fixture_json("caching_allocator.json")
    for name in ("default", "expandable_segments:True"):  # 96 and 48 MiB beyond 3,252 MiB: no finding
        cache = cache_from_stats(captured[name], captured[name]["nvml_process_used"])
        assert cache.reserved - cache.allocated <= 96 * MiB
        assert not gpu_findings(_snapshot({}, 1 << 30, GpuMemory(torch=cache)))
    default = cache_from_stats(captured["default"], None)
    assert (default.inactive_split, cache_from_stats(captured["expandable_segments:True"], None).inactive_split) == \
        (96 * MiB, 0)
    held = cache_from_stats({"allocated_bytes.all.current": 1 << 30, "reserved_bytes.all.current": 3 << 30,
                             "inactive_split_bytes.all.current": 512 * MiB, "segment.all.current": 40}, None)
    (finding,) = gpu_findings(_snapshot({}, 1 << 30, GpuMemory(torch=held)))
    assert finding.code == "torch-cache-retained" and "2048.0 MiB" in finding.summary
    assert EXPANDABLE in finding.remedy


# --- shown beside RSS: the JSON, the tables, Prometheus ---

def _gpu_snapshot():
    from memgap.documents.gpu import GpuDevice, GpuMemory
    from memgap.sources.torch_cuda import cache_from_stats

    layers, _, status, _ = _layers("cuda")
    inside = _fixture_json("cuda", "inside.json")
    gpu = GpuMemory([GpuDevice(0, "NVIDIA H200", "GPU-1", 4842 * MiB, 143771 * MiB)], "580.159.04",
                    torch=cache_from_stats(inside["memory_stats"], 4842 * MiB, inside["host_memory_stats"]))
    return _snapshot(layers, int(status["VmRSS"]), gpu)


def test_device_memory_is_shown_beside_rss_not_in_it():
    from memgap.documents.snapshot import Snapshot
    from memgap.report.terminal import render_text

    snap = _gpu_snapshot()
    again = Snapshot.from_dict(snap.to_dict())
    assert again.gpu == snap.gpu and again.gpu.used == 4842 * MiB
    assert sum(layer.resident or 0 for layer in snap.layers.values()) <= snap.rss < snap.gpu.used  # not a layer
    text = render_text(snap)
    assert "GPU 0 NVIDIA H200: 4842.0 MiB of 143771.0 MiB" in text and "(driver 580.159.04)" in text
    assert "likely pinned host memory (CUDA)" in text and "GPU driver's mappings" in text
    assert "context and libraries" in text and "allocated 4256.0 MiB" in text
    assert "pinned host memory (torch.cuda.host_memory_stats()): held 1024.0 MiB, in use 1024.0 MiB" in text
    plain = render_text(_snapshot({}, 100 * MiB))
    assert "GPU" not in plain and "pinned" not in plain


def test_the_html_snapshot_shows_the_gpu_lines_the_terminal_shows():
    from html import escape

    from memgap.documents.gpu import GpuMemory
    from memgap.report.gpu import gpu_lines
    from memgap.report.snapshot_html import snapshot_fragment, snapshot_page

    snap = _gpu_snapshot()
    page = snapshot_page(snap)
    lines = gpu_lines(snap)
    assert len(lines) == 6 and all(escape(line.strip()) in page for line in lines), lines
    assert f'<li data-gpu="0" data-bytes="{4842 * MiB}">GPU 0 NVIDIA H200: 4842.0 MiB of 143771.0 MiB</li>' in page
    # PyTorch's cache read from inside, where NVML listed no GPU for the process: its lines alone
    inside = _snapshot({}, 100 * MiB, GpuMemory(torch=snap.gpu.torch))
    fragment = snapshot_fragment(inside)
    assert all(escape(line.strip()) in fragment for line in gpu_lines(inside))
    assert "NVIDIA H200" not in fragment and "beside RSS (not in it)" not in fragment
    plain = snapshot_fragment(_snapshot({}, 100 * MiB))  # no GPU read: nothing of it
    assert 'class="gpu"' not in plain and "GPU" not in plain and "PyTorch" not in plain


def test_prometheus_serves_device_memory_per_gpu():
    from memgap.metrics.export import Target, process_families, render

    text = render(process_families([Target(_gpu_snapshot(), "train", 0)]))
    assert f'memgap_gpu_memory_bytes{{role="train",index="0",allocator="glibc",gpu="0"}} {4842 * MiB}' in text
    assert 'memgap_memory_bytes{role="train",index="0",allocator="glibc",layer="pinned_host"}' in text
    assert 'memgap_torch_cuda_bytes{role="train",index="0",allocator="glibc",kind="reserved"} 4462739456' in text
    assert "memgap_gpu" not in render(process_families([Target(_snapshot({}, MiB), "x", 0)]))


def test_a_driver_mappings_pages_without_a_page_frame_count_nowhere():
    # /dev/nvidia0's register window (VM_PFNMAP): pagemap may show its entries present without the file-page bit,
    # as it shows a private copy; the kernel counts them in no RSS, so no layer may (not files, not other_anon)
    pages = 16
    window = Mapping(0x200000, 0x200000 + pages * PAGE_SIZE, "rw-s", 0, "00:06", 5, "/dev/nvidia0")
    res = ResidentMap(NoMemory())
    res.add(window.start, window.end, bytes([1] * pages), bytes([1] * pages))
    memmap = MemoryMap([MappedPages(window, PageCounts(pages, pages, 0, pages, pages))], res)
    regions = label_regions(NoMemory(), memmap, None, None, None)
    assert [(r.owner, r.resident) for r in regions] == [(GPU_DRIVER, 0)]
    layers, unexplained = attribute(Measurements(rss=0, regions=regions))
    assert layers["gpu_driver"].resident == 0 and layers["other_anon"].resident == 0 and unexplained == 0


def test_runs_timeline_shows_device_memory_beside_rss_only_where_sampled():
    import io

    from memgap.documents.records import ProcessRecord, RunDocument
    from memgap.report.run import timeline_table
    from memgap.report.terminal import console_on

    def shown(timeline):
        out = io.StringIO()
        console_on(out).print(timeline_table(RunDocument([ProcessRecord(7, [])], interval=0.1, timeline=timeline)))
        return out.getvalue()

    plain = [{"t": 0.1 * i, "pid": 7, "rss": (100 + i) * MiB} for i in range(3)]
    assert "GPU" not in shown(plain)
    gpu = [{**s, "gpu": (4000 + 400 * i) * MiB} for i, s in enumerate(plain)] + \
        [{"t": 0.3, "pid": 8, "rss": 5 * MiB}]  # a process of the tree with no device memory
    text = shown(gpu)
    assert "GPU peak" in text and "4800.0" in text and "device memory, beside RSS" in text
    row = next(line.split("│") for line in text.splitlines() if line.split("│")[1:2] == ["   8 "])
    assert [cell.strip() for cell in row[7:9]] == ["-", "-"]  # no device memory for it: said, not 0


def test_a_tree_where_only_one_process_has_a_gpu_sums_and_shows_its_layers():
    # a PyTorch process that spawned a helper without CUDA: the tree's table, its totals and top's series hold
    # the GPU layers of the one, "-" for the other (they raised KeyError where the first process lacked a layer)
    import dataclasses
    import io
    from collections import deque

    from memgap.cli.top import refresh_of
    from memgap.documents.records import TreeDocument
    from memgap.documents.snapshot import Layer, TreeSnapshot
    from memgap.report.live import frame
    from memgap.report.terminal import console_on, render_tree

    gpu = _gpu_snapshot()
    helper = _snapshot({"files": Layer("files", 10 * MiB), "other_anon": Layer("other_anon", 5 * MiB)}, 15 * MiB)
    for processes in ([helper, dataclasses.replace(gpu, pid=459)], [dataclasses.replace(gpu, pid=459), helper]):
        doc = TreeDocument.of(TreeSnapshot(processes[0].pid, processes), [])
        assert doc.totals.layers["pinned_host"] == 1032 * MiB and doc.totals.layers["files"] > 10 * MiB
        out = io.StringIO()
        render_tree(doc, out, 200)
        text = out.getvalue()
        assert "pinned?" in text and "PID 459: GPU 0 NVIDIA H200: 4842.0 MiB" in text
        refresh = refresh_of(deque([doc]))
        assert refresh.layers["pinned_host"] == [1032 * MiB]
        console_on(io.StringIO(), 200).print(frame(refresh, 200))
