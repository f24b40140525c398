"""What a process's maps say about its GPU: the NVIDIA driver's device mappings, and whether it uses CUDA.

The driver's mappings are told by their files (``/dev/nvidiactl``, ``/dev/nvidia0``, ``/dev/nvidia-uvm``, ...):
a certain name. CUDA's pinned host memory (``cudaHostAlloc``, PyTorch's ``pin_memory``) is shared anonymous
memory (``/dev/zero (deleted)``, flags ``rd wr sh mr mw me ms``) like any other ``MAP_SHARED`` buffer: from
outside it is only *likely* pinned, and only in a process that uses CUDA, which here means one that has the
driver's library (``libcuda.so``) loaded and a context open (a mapping of the driver's device files). A process
that only loaded CUDA's libraries (``import torch`` without a GPU tensor) has no context, so no pinned memory.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from memgap.sources.procfs import Mapping, shared_memory_kind

GPU_DRIVER, PINNED_LIKELY = "gpu-driver", "pinned-likely"  # the owners of their regions (explain.snapshot)
DRIVER_DEVICE_PREFIX = "/dev/nvidia"   # nvidiactl, nvidia0..N, nvidia-uvm(-tools), nvidia-modeset, nvidia-caps/*
DRIVER_LIBRARY_PREFIX = "libcuda.so"   # the driver API: libcuda.so.1 -> libcuda.so.<driver version>
CUDA_WORD = "cuda"  # in an object's file name: CUDA's own libraries, and a framework's CUDA build of its own
PINNED_WHY = ("likely: shared anonymous memory (/dev/zero (deleted)) in a process that uses CUDA (libcuda.so loaded, "
              "the driver's device files mapped), as CUDA's pinned host allocations are; from outside nothing "
              "else tells them from another MAP_SHARED buffer")
DRIVER_WHY = "certain: mappings of the NVIDIA driver's device files (/dev/nvidia*)"


def is_driver_device(path: str) -> bool:
    """A mapping of one of the NVIDIA driver's device files."""
    return path.startswith(DRIVER_DEVICE_PREFIX)


def uses_cuda(maps: Iterable[Mapping]) -> bool:
    """Whether a process has the CUDA driver's library loaded and a context open (the driver's devices
    mapped): only then may its shared anonymous memory be CUDA's pinned host memory."""
    library = device = False
    for m in maps:
        library = library or os.path.basename(m.path).startswith(DRIVER_LIBRARY_PREFIX)
        device = device or is_driver_device(m.path)
        if library and device:
            return True
    return False


def cuda_objects(paths: Iterable[str]) -> list[str]:
    """The file names of the mapped objects whose names say CUDA (``libcuda.so.1``, ``libcudart.so.13``,
    PyTorch's ``libc10_cuda.so`` and ``libtorch_cuda.so``), each once, sorted: what the lab reads of a
    recording to tell which framework's device memory settings to try (memgap.lab.choose)."""
    return sorted({name for name in map(os.path.basename, paths) if CUDA_WORD in name.lower() and ".so" in name})


def shared_owner(path: str, cuda: bool) -> str:
    """The owner of a shared memory mapping's pages: likely pinned host memory where it is shared
    anonymous memory in a process that uses CUDA, else shared memory ("shmem")."""
    return PINNED_LIKELY if cuda and shared_memory_kind(path) == "anonymous" else "shmem"
