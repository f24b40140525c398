"""PyTorch's CUDA caching allocator's own settings as lab variants (``torch:expandable_segments=True``), given to
an unmodified program through its environment, as c10 reads it when its allocator's configuration is first used:

- one variable holds them all, ``key:value`` pairs joined by commas. torch 2.9 and later (2.11 measured) read
  PYTORCH_ALLOC_CONF, and only where it is unset PYTORCH_CUDA_ALLOC_CONF (with a deprecation warning); older
  ones read PYTORCH_CUDA_ALLOC_CONF alone. So a variant sets both, to the same value: whichever torch runs
  reads its settings, and none warns. Each is the user's own settings (PYTORCH_ALLOC_CONF's where set, as torch
  2.11 would read them, else PYTORCH_CUDA_ALLOC_CONF's) followed by the variant's: c10 reads them in order and
  a later key overrides an earlier one.
- ``expandable_segments``: ``True``: the cache maps device memory into segments that grow and shrink in place
  (CUDA's virtual memory API) instead of fixed blocks that a tensor splits, so what is freed is not stranded in
  split blocks (issue 33's fragmenting loop on an H200: the split bytes went to 0).
- ``garbage_collection_threshold``: a fraction in (0, 1): above that share of the memory the process may use,
  the cache frees its blocks not reused lately before it asks the driver for more.
- ``max_split_size_mb``: blocks larger than this (MiB, more than 20) are never split, so a large free block
  does not end as split remnants no request fits.
- ``roundup_power2_divisions``: a power of two: sizes are rounded up to that many divisions of each power of
  two, so freed blocks fit later requests of nearby sizes.

c10 checks each value (a bad one fails the program at its first CUDA allocation): the checks here are c10's
own (``c10/core/AllocatorConfig.cpp``, torch 2.11), so a bad value is refused before any run. These settings
change device memory, not RSS: the lab judges them on the tree's GPU memory (memgap.lab.objective).
"""
from __future__ import annotations

from collections.abc import Mapping

from memgap.runtimes import register_settings
from memgap.runtimes.settings import RuntimeSettings, appended, one_of

VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # torch >= 2.9 reads the first, older ones the second
EXPANDABLE = "torch:expandable_segments=True"


def env(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Both variables: the user's settings (those torch 2.11 would read), then the variant's."""
    own = environ.get(VARIABLES[0]) or environ.get(VARIABLES[1], "")
    value = appended(own, ",", *(f"{key}:{value}" for key, value in options.items()))
    return dict.fromkeys(VARIABLES, value)


def variants(peak: int | None) -> tuple[str, ...]:
    """Expandable segments alone: the setting that keeps freed device memory from being stranded in split
    blocks, the remedy of the finding torch-cache-retained."""
    return (EXPANDABLE,)


def _fraction(value: str) -> str:
    try:
        ok = 0.0 < float(value) < 1.0
    except ValueError:
        ok = False
    return "" if ok and value.isascii() else "a fraction between 0 and 1, both left out (0.8)"


def _split_size(value: str) -> str:
    return "" if value.isascii() and value.isdigit() and int(value) > 20 else "MiB: a whole number over 20"


def _power_of_two(value: str) -> str:
    ok = value.isascii() and value.isdigit() and int(value) > 0 and int(value) & (int(value) - 1) == 0
    return "" if ok else "a power of two (1, 2, 4, 8, 16, ...)"


SETTINGS = RuntimeSettings(
    runtime="torch", prefix="torch",
    keys={"expandable_segments": one_of("True", "False"), "garbage_collection_threshold": _fraction,
          "max_split_size_mb": _split_size, "roundup_power2_divisions": _power_of_two},
    env=env, variants=variants, libraries=("libc10_cuda.so", "libtorch_cuda.so"), device=True,
    found="is PyTorch's CUDA build, and the process has a CUDA context: its caching allocator's own settings",
    notes=("torch 2.9 and later read PYTORCH_ALLOC_CONF (and PYTORCH_CUDA_ALLOC_CONF only where it is unset, with "
           "a deprecation warning), older ones PYTORCH_CUDA_ALLOC_CONF: both are set to the same value; a program "
           "that sets them itself before its first CUDA allocation, or calls "
           "torch.cuda.memory._set_allocator_settings, overrides them",
           "these settings change the GPU's memory, not RSS: the lab compared them on the tree's device memory "
           "(NVML)"))
register_settings(SETTINGS)
