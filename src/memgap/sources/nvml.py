"""Each process's GPU memory as the NVIDIA driver counts it, through NVML: the driver's own library
(``libnvidia-ml.so.1``), loaded with ctypes only where it exists, so no dependency is added.

Where the library is missing (no NVIDIA driver: CI, most machines), the one failed ``dlopen`` is remembered
and nothing else is tried or said. The parsing of NVML's process records is apart from the calls
(``parse_processes``), so it is tested on plain bytes. NVML names processes by their PIDs in the host's PID
namespace: in a container with its own, a process is not found (its figure is then absent, not zero).
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Any

from memgap.documents.gpu import GpuDevice, GpuMemory

LIBRARY = "libnvidia-ml.so.1"
NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE: usedGpuMemory the driver does not give
SUCCESS, INSUFFICIENT_SIZE = 0, 7
# nvmlProcessInfo_t: pid (uint), usedGpuMemory (ull), and from _v2 on gpuInstanceId, computeInstanceId (uint)
RECORD_V1, RECORD_V2 = struct.Struct("<I4xQ"), struct.Struct("<I4xQII")
# the process lists, newest first: each call's records, and their layout
PROCESS_CALLS = (("ComputeRunningProcesses_v3", RECORD_V2), ("ComputeRunningProcesses_v2", RECORD_V2),
                 ("ComputeRunningProcesses", RECORD_V1), ("GraphicsRunningProcesses_v3", RECORD_V2),
                 ("GraphicsRunningProcesses_v2", RECORD_V2), ("GraphicsRunningProcesses", RECORD_V1))
_LOCK = threading.Lock()


def parse_processes(raw: bytes, count: int, record: struct.Struct) -> dict[int, int | None]:
    """PID -> used device memory in bytes (None where the driver did not say) from ``count`` NVML process
    records; a PID listed twice (compute and graphics) keeps its larger figure."""
    out: dict[int, int | None] = {}
    for i in range(min(count, len(raw) // record.size)):
        pid, used = record.unpack_from(raw, i * record.size)[:2]
        figure = None if used == NOT_AVAILABLE else used
        old = out.get(pid)
        out[pid] = figure if old is None else max(old, figure or 0)
    return out


def decode_text(buffer: bytes) -> str:
    """A C string NVML wrote into a buffer."""
    return buffer.split(b"\0", 1)[0].decode("utf-8", "replace")


class _Nvml:
    """NVML initialised once in this process (its handle's calls are thread-safe)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        if lib.nvmlInit_v2() != SUCCESS:
            raise OSError("nvmlInit_v2 failed")
        self.driver = self._text(lib.nvmlSystemGetDriverVersion)

    def _text(self, call: Callable[..., int], *args: Any) -> str:
        buffer = ctypes.create_string_buffer(96)
        return decode_text(buffer.raw) if call(*args, buffer, ctypes.c_uint(96)) == SUCCESS else ""

    def handles(self) -> list[tuple[int, Any]]:
        count = ctypes.c_uint(0)
        if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != SUCCESS:
            return []
        out = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) == SUCCESS:
                out.append((index, handle))
        return out

    def processes(self, handle: Any) -> dict[int, int | None]:
        """Every process on one GPU with its device memory: compute and graphics, each from the newest call
        this driver has."""
        out: dict[int, int | None] = {}
        for kind in ("Compute", "Graphics"):
            for name, record in PROCESS_CALLS:
                call = getattr(self.lib, f"nvmlDeviceGet{name}", None)
                if name.startswith(kind) and call is not None:
                    for pid, used in self._records(call, handle, record).items():
                        out[pid] = used if out.get(pid) is None else max(out[pid] or 0, used or 0)
                    break
        return out

    def _records(self, call: Callable[..., int], handle: Any, record: struct.Struct) -> dict[int, int | None]:
        count = ctypes.c_uint(0)
        for _ in range(3):  # the list may grow between the size asked and the read
            buffer = ctypes.create_string_buffer(max(1, count.value) * record.size)
            status = call(handle, ctypes.byref(count), buffer)
            if status == SUCCESS:
                return parse_processes(buffer.raw, count.value, record)
            if status != INSUFFICIENT_SIZE:
                return {}
            count = ctypes.c_uint(count.value + 4)
        return {}

    def device(self, index: int, handle: Any, used: int | None) -> GpuDevice:
        memory = (ctypes.c_ulonglong * 3)()  # nvmlMemory_t: total, free, used
        total = memory[0] if self.lib.nvmlDeviceGetMemoryInfo(handle, memory) == SUCCESS else None
        return GpuDevice(index, self._text(self.lib.nvmlDeviceGetName, handle),
                         self._text(self.lib.nvmlDeviceGetUUID, handle), used, total)


@functools.cache
def _nvml(pid_of_this_process: int, only_loaded: bool = False) -> _Nvml | None:
    """NVML in this process (a forked child initialises its own), or None where the driver's library is
    not here or does not start: tried once, remembered. ``only_loaded``: only where the program loaded it
    already (RTLD_NOLOAD): memgap reading its own process does not load a library into the program."""
    try:
        mode = os.RTLD_NOLOAD | os.RTLD_LAZY if only_loaded else ctypes.DEFAULT_MODE
        return _Nvml(ctypes.CDLL(LIBRARY, mode=mode))
    except (OSError, AttributeError):
        return None


def available() -> bool:
    """Whether NVML is here (its library loaded and initialised); the first call tries, once."""
    with _LOCK:
        return _nvml(os.getpid()) is not None


def gpu_memory(pids: Iterable[int], only_loaded: bool = False) -> dict[int, GpuMemory]:
    """Each of ``pids`` that the driver lists on a GPU, with its device memory per GPU; {} without NVML
    (``only_loaded``: without NVML loaded in this process already)."""
    with _LOCK:
        nvml = _nvml(os.getpid(), only_loaded)
        if nvml is None:
            return {}
        wanted, found = set(pids), dict[int, list[GpuDevice]]()
        for index, handle in nvml.handles():
            processes = nvml.processes(handle)
            for pid in wanted & processes.keys():
                found.setdefault(pid, []).append(nvml.device(index, handle, processes[pid]))
        return {pid: GpuMemory(devices, nvml.driver) for pid, devices in found.items()}


def device_memory(pids: Iterable[int]) -> dict[int, int]:
    """Each of ``pids`` with device memory the driver counts, over its GPUs, in bytes: what a timeline samples.
    Without NVML, {} after one failed dlopen (remembered); a process the driver lists with no figure is left out."""
    out = {}
    for pid, gpu in gpu_memory(pids).items():
        used = gpu.used
        if used is not None:
            out[pid] = used
    return out
