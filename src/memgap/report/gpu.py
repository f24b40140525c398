"""Device memory beside RSS, never in it: a snapshot's ``gpu`` as lines (inspect, top, run's breakdowns,
a tree's processes). A snapshot without it gives no line: a process without a GPU shows what it always did."""
from __future__ import annotations

from collections.abc import Sequence

from memgap.documents.gpu import GpuDevice, GpuMemory, TorchCache
from memgap.documents.snapshot import Snapshot
from memgap.report.units import mib

HEAD = "GPU memory, beside RSS (not in it): the driver's count through NVML"


def device_text(d: GpuDevice) -> str:
    """One GPU's figure: "GPU 0 NVIDIA H200: 4842.0 MiB of 143771.0 MiB"."""
    if d.used is None:
        return f"GPU {d.index} {d.name}: not given by the driver"
    return f"GPU {d.index} {d.name}: {mib(d.used)} MiB" + (f" of {mib(d.total)} MiB" if d.total else "")


def torch_lines(cache: TorchCache) -> list[str]:
    """PyTorch's caching allocator, its figures and the driver's beside them."""
    context = cache.context_and_libraries
    return [f"PyTorch's CUDA cache (torch.cuda.memory_stats()): allocated {mib(cache.allocated)} MiB, reserved "
            f"{mib(cache.reserved)} MiB, {cache.segments} segments",
            f"  cached {mib(cache.cached)} MiB (reserved - allocated), of it {mib(cache.inactive_split)} MiB in "
            "split blocks",
            *([f"  context and libraries {mib(context)} MiB (the driver's {mib(cache.driver_used)} MiB - reserved)"]
              if context is not None else []),
            *([f"  pinned host memory (torch.cuda.host_memory_stats()): held {mib(cache.pinned_held)} MiB, in use "
               f"{mib(cache.pinned_active or 0)} MiB"] if cache.pinned_held is not None else [])]


def heading(gpu: GpuMemory) -> str:
    """The line above a process's GPUs: where their figures come from."""
    return f"{HEAD} (driver {gpu.driver})"


def gpu_lines(snap: Snapshot) -> list[str]:
    """One process's device memory: a heading, a line per GPU, then PyTorch's cache where read; none without
    ``gpu``."""
    gpu = snap.gpu
    if gpu is None:
        return []
    lines = [heading(gpu), *(f"  {device_text(d)}" for d in gpu.devices)] if gpu.devices else []
    return lines + (torch_lines(gpu.torch) if gpu.torch is not None else [])


def tree_gpu_lines(snaps: Sequence[Snapshot]) -> list[str]:
    """A tree's device memory: each process that has some, and their sum; none where no process has any."""
    having = [(s.pid, s.gpu) for s in snaps if s.gpu is not None and s.gpu.devices]
    if not having:
        return []
    total = sum(gpu.used or 0 for _, gpu in having)
    return [f"{HEAD}: {mib(total)} MiB over {len(having)} process{'es' if len(having) != 1 else ''}",
            *(f"  PID {pid}: {'; '.join(device_text(d) for d in gpu.devices)}" for pid, gpu in having)]
