"""PyTorch's CUDA caching allocator read from inside the process (``run``'s child, the API), only where the
program already imported torch and initialised CUDA: memgap never imports torch nor starts a CUDA context
(either would cost the program hundreds of MiB and seconds). The arithmetic is apart from the module, so a
test hands it a stand-in object."""
from __future__ import annotations

import sys
from typing import Any

from memgap.documents.gpu import GpuMemory, TorchCache

STATS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "inactive_split_bytes.all.current",
         "segment.all.current")


HOST_STATS = ("allocated_bytes.current", "active_bytes.current")  # torch.cuda.host_memory_stats()'s


def cache_from_stats(stats: dict[str, Any], driver_used: int | None,
                     host: dict[str, Any] | None = None) -> TorchCache:
    """The caching allocator's figures from ``torch.cuda.memory_stats()``'s dict (summed over the devices
    it was asked for), with the driver's figure beside them, and the pinned host allocator's from
    ``torch.cuda.host_memory_stats()``'s dict where given."""
    allocated, reserved, inactive, segments = (int(stats.get(key, 0)) for key in STATS)
    held, active = (int(host[key]) if host is not None and key in host else None for key in HOST_STATS)
    return TorchCache(allocated, reserved, inactive, segments, driver_used, held, active)


def _host_stats(cuda: Any) -> dict[str, Any] | None:
    """torch.cuda.host_memory_stats() (torch 2.5 and later), None where this torch has none or it fails."""
    try:
        stats = cuda.host_memory_stats()
    except (AttributeError, RuntimeError, TypeError):
        return None
    return dict(stats) if stats else None


def torch_cache(gpu: GpuMemory | None, modules: dict[str, Any] | None = None) -> TorchCache | None:
    """This process's caching allocator, where torch is imported and its CUDA initialised; None otherwise.
    ``modules``: where torch is looked up (``sys.modules``)."""
    torch = (sys.modules if modules is None else modules).get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    totals: dict[str, int] = {}
    for device in range(cuda.device_count()):
        stats = cuda.memory_stats(device)
        for key in STATS:
            totals[key] = totals.get(key, 0) + int(stats.get(key, 0))
    return cache_from_stats(totals, gpu.used if gpu is not None else None, _host_stats(cuda))
