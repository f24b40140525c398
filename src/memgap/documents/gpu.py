"""A process's GPU memory as a snapshot carries it (``Snapshot.gpu``): device memory beside RSS, never in it.

Per GPU, the device memory the driver counts for the process (NVML, ``memgap.sources.nvml``); in the process
itself, where PyTorch already runs CUDA, its caching allocator's own figures (``memgap.sources.torch_cuda``).
Here, below the sources, so that a document names its parts without importing the readers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NVML_ROUTE = "NVML (libnvidia-ml.so.1): nvmlDeviceGetComputeRunningProcesses, ...GraphicsRunningProcesses"


@dataclass(frozen=True)
class GpuDevice:
    """One GPU's memory used by the process, as the driver counts it (NVML's usedGpuMemory)."""

    index: int
    name: str
    uuid: str
    used: int | None     # bytes; None: the driver did not say (NVML_VALUE_NOT_AVAILABLE: no permission, MIG)
    total: int | None = None  # the GPU's memory, for scale


@dataclass(frozen=True)
class TorchCache:
    """PyTorch's CUDA caching allocator from inside (``torch.cuda.memory_stats()``, all devices it uses),
    and its pinned host allocator's figures, read at the snapshot's moment."""

    allocated: int        # allocated_bytes.all.current: its tensors
    reserved: int         # reserved_bytes.all.current: what it holds from the driver, tensors and cache
    inactive_split: int   # inactive_split_bytes.all.current: free bytes in blocks split for a tensor
    segments: int         # segment.all.current: its cudaMalloc'ed blocks
    driver_used: int | None = None  # the driver's figure for this process over the same GPUs (NVML)
    # its pinned host memory, torch.cuda.host_memory_stats() (None: a torch without it): what the host
    # allocator holds (allocated_bytes.current: cudaHostAlloc'ed, in use or cached) and what tensors use of it
    pinned_held: int | None = None
    pinned_active: int | None = None

    @property
    def cached(self) -> int:
        """Reserved but not allocated: free device memory the cache keeps for reuse."""
        return self.reserved - self.allocated

    @property
    def context_and_libraries(self) -> int | None:
        """The driver's figure less what the cache reserved: the CUDA context, its libraries' kernels
        and workspaces (cuBLAS, cuDNN), and any memory allocated beside the cache."""
        return None if self.driver_used is None else self.driver_used - self.reserved


@dataclass(frozen=True)
class GpuMemory:
    """The process's device memory, per GPU, beside its RSS; None in a snapshot where no GPU was read."""

    devices: list[GpuDevice] = field(default_factory=list)
    driver: str = ""      # the driver's version, as NVML says it
    route: str = NVML_ROUTE
    torch: TorchCache | None = None

    @property
    def used(self) -> int | None:
        """Device memory over its GPUs; None where the driver said none of them."""
        known = [d.used for d in self.devices if d.used is not None]
        return sum(known) if known else None
