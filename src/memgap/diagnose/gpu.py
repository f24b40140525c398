"""A GPU process's findings: pinned host memory a large part of its RSS (from the pinned_host layer, a
likelihood from outside, confirmed by PyTorch's own count where it was read in the process), and PyTorch's
caching allocator holding much more than its tensors use (from its own statistics, read in the process:
``Snapshot.gpu``'s ``torch``)."""
from __future__ import annotations

from memgap.diagnose.floors import FLOOR, SHARE, _resident
from memgap.documents.snapshot import Finding, Snapshot
from memgap.report.units import mib, pct

CACHE_FLOOR = 256 << 20  # device memory: cheap to hold below this
CACHE_RATIO = 1.25       # reserved over allocated above this: the cache holds a quarter more than is in use
EXPANDABLE = "PYTORCH_ALLOC_CONF=expandable_segments:True"
LAB_VARIANT = "torch:expandable_segments=True"  # memgap.runtimes.torch_settings: the lab adds it on this finding


def _pinned(snap: Snapshot) -> list[Finding]:
    """Pinned host memory over the floor and the share of RSS: likely from outside, confirmed where PyTorch's
    host allocator was read in the process (``gpu.torch.pinned_held``)."""
    layer = snap.layers.get("pinned_host")
    pinned = _resident(snap, "pinned_host")
    if layer is None or pinned < FLOOR or pinned < SHARE * snap.rss:
        return []
    pss = f", PSS {mib(layer.pss)} MiB" if layer.pss is not None else ""
    torch = snap.gpu.torch if snap.gpu is not None else None
    outside = (f"{layer.detail.get('mappings', 0)} shared anonymous mappings (/dev/zero (deleted)); "
               f"{layer.detail.get('confidence', '')}")
    if torch is None or torch.pinned_held is None:
        summary = f"likely pinned host memory: {mib(pinned)} MiB"
        inside = "from inside, PyTorch counts its own: torch.cuda.host_memory_stats()['allocated_bytes.current']"
    else:  # read in the process: PyTorch's own count says how much of it is its pinned pool
        held = torch.pinned_held
        summary = f"pinned host memory: {mib(pinned)} MiB, PyTorch's pinned pool {mib(held)} MiB of it"
        inside = (f"read in the process, torch.cuda.host_memory_stats(): allocated_bytes.current {held} (what its "
                  f"host allocator holds), active_bytes.current {torch.pinned_active} (what tensors use); the "
                  "rest of the layer is CUDA's own (its staging buffers) or another library's")
    return [Finding(
        "pinned-host-memory", "info",
        f"{summary}, {pct(pinned, snap.rss)} of its RSS{pss}: page-locked buffers CUDA copies through, resident for "
        "as long as they live", [outside, inside],
        "fewer or smaller pinned buffers (tensor.pin_memory(), DataLoader(pin_memory=True) per worker); "
        "PyTorch keeps freed pinned blocks cached for reuse")]


def _torch_cache(snap: Snapshot) -> list[Finding]:
    """PyTorch's caching allocator reserving much more device memory than its tensors are allocated."""
    torch = snap.gpu.torch if snap.gpu is not None else None
    if torch is None:
        return []
    cached = torch.reserved - torch.allocated
    if cached < CACHE_FLOOR or torch.reserved < CACHE_RATIO * torch.allocated:
        return []
    return [Finding(
        "torch-cache-retained", "warning",
        f"PyTorch's CUDA cache holds {mib(cached)} MiB of device memory beyond its tensors: reserved "
        f"{mib(torch.reserved)} MiB, allocated {mib(torch.allocated)} MiB",
        [f"torch.cuda.memory_stats(): reserved_bytes.all.current {torch.reserved}, allocated_bytes.all.current "
         f"{torch.allocated}, inactive_split_bytes.all.current {torch.inactive_split} (free bytes in blocks split "
         f"for a tensor: fragmentation), {torch.segments} segments"],
        f"{EXPANDABLE} in its environment (segments that grow and shrink in place of fixed-size blocks, so freed "
        f"memory is not stranded in split ones), or torch.cuda.empty_cache() after a peak; `memgap lab` measures "
        f"it as {LAB_VARIANT}, on the GPU's memory and the step time")]


def gpu_findings(snap: Snapshot) -> list[Finding]:
    """The GPU findings of one snapshot (none in a process without a GPU)."""
    return [*_pinned(snap), *_torch_cache(snap)]
