"""The join: labelled regions and allocator statistics become layers that add up to RSS.

Pure: takes what the collectors measured, returns layers. Every layer says how
it was derived; a figure that could not be measured is ``None`` with the
reason, never a guess presented as a measurement.
"""
from __future__ import annotations

from memgap.allocators.base import Share, unread_share
from memgap.allocators.measured import Measurements, Owners as _Owners, Sizes as _Sizes
from memgap.allocators.pymalloc import READER as PYMALLOC
from memgap.documents.snapshot import Layer
from memgap.sources.gpu_maps import DRIVER_WHY, GPU_DRIVER, PINNED_LIKELY, PINNED_WHY, cuda_objects
from memgap.sources.static_data import LIKELY, STATIC_DATA, STATIC_LIKELY

LIBRARY_POOL = "library-pool"  # the owner of the arenas of an allocator a library bundles (its regions)

MiB = 1 << 20


def _c_allocator(m: Measurements, owned: _Owners) -> Share:
    """The C allocator's share, from the first reader whose figures ``m`` holds (glibc's heaps walked,
    another allocator's own counters), or (none) nothing measured."""
    from memgap.allocators.registry import c_readers

    for reader in c_readers():
        share = reader.share(m, owned)
        if share is not None:
            return share
    return unread_share(owned)


def attribute(m: Measurements) -> tuple[dict[str, Layer], int]:
    """Layers (by name) and the unexplained remainder ``rss - sum(layers)``: the arithmetic, with
    the C allocator's figures from its reader (``_c_allocator``) and each layer's text below."""
    owned = _Owners(m.regions)
    c = _c_allocator(m, owned)
    in_use, in_use_part = c.in_use, c.in_use_part
    small, large, py_how = PYMALLOC.python_sizes(m, owned(PYMALLOC.owner))
    # Python's large objects move from the C allocator's in use to python_objects; a walk may count more
    # free than the heap holds (in_use < 0): nothing to move then, and never below what pymalloc shows
    moved = max(0, min(large, in_use)) if in_use is not None else 0
    if in_use is not None:
        in_use -= moved
    moved_part = in_use_part.take(moved)
    in_use_part -= moved_part
    arenas_part = owned.part(PYMALLOC.owner)
    python, pymalloc_free = PYMALLOC.python_layers(m, owned, small, large, moved, py_how)
    files, shared_memory, stacks = _mapped_layers(owned)
    allocator_in_use, allocator_free = _allocator_layers(m, c, in_use, moved)
    layers = {"files": files, "shared_memory": shared_memory, **_gpu_layers(m, owned), "python_objects": python,
              "pymalloc_free": pymalloc_free, **_runtime_layers(m, owned), "allocator_in_use": allocator_in_use,
              "allocator_free": allocator_free, **_library_layer(m, owned), "stacks": stacks,
              "static_data": _static_layer(m, owned), "other_anon": _other_anon_layer(m, c, owned)}
    small_part = arenas_part.take((python.resident or 0) - moved)
    _set_shares(layers, {"files": owned.part("file"), "shared_memory": owned.part("shmem"),
                         "stacks": owned.part("stack"), "static_data": owned.part(STATIC_DATA, STATIC_LIKELY),
                         "python_objects": small_part + moved_part, "pymalloc_free": arenas_part - small_part,
                         "runtime_heap": owned.part("runtime-heap", "runtime-free"),
                         "runtime_metadata": owned.part("runtime-meta"),
                         "allocator_in_use": in_use_part, "allocator_free": c.free_part,
                         "library_allocators": owned.part(LIBRARY_POOL),
                         "other_anon": c.other_part + owned.part("file-cow"),
                         "gpu_driver": owned.part(GPU_DRIVER), "pinned_host": owned.part(PINNED_LIKELY)})
    total = sum(layer.resident or 0 for layer in layers.values())
    return layers, m.rss - total


def _runtime_layers(m: Measurements, owned: _Owners) -> dict[str, Layer]:
    """runtime_heap and runtime_metadata where a runtime's heap was read (none otherwise: a process
    without one shows no such layer)."""
    if not m.runtimes:
        return {}
    from memgap.runtimes.layers import FREE_OWNER, HEAP_OWNER, META_OWNER, runtime_layers

    def resident(owner: str, name: str) -> int:  # a runtime's regions are labelled "[NAME] what"
        return sum(r.resident for r in m.regions if r.owner == owner and r.path.startswith(f"[{name}]"))

    free = {h.info.name: resident(FREE_OWNER, h.info.name) for h in m.runtimes}
    heap_resident = {h.info.name: resident(HEAP_OWNER, h.info.name) + free[h.info.name] for h in m.runtimes}
    meta_resident = {h.info.name: resident(META_OWNER, h.info.name) for h in m.runtimes}
    virtual = owned.virtual.get(HEAP_OWNER, 0) + owned.virtual.get(FREE_OWNER, 0)
    heap, meta = runtime_layers(m.runtimes, heap_resident, free, meta_resident, virtual)
    return {"runtime_heap": heap, "runtime_metadata": meta}


def _mapped_layers(owned: _Owners) -> tuple[Layer, Layer, Layer]:
    """files, shared_memory and stacks: read from the memory map and pagemap alone."""
    files = Layer(
        "files", owned("file"), virtual=None,
        derivation="pagemap: present pages of file-backed mappings (bit 61), shared memory apart (its own "
                   "layer, shared_memory: detail shmem)",
        source="pagemap",
        detail={"file": owned("file"), "shmem": owned("shmem")},
    )
    shared_memory = Layer(
        "shared_memory", owned("shmem"), virtual=owned.virtual.get("shmem", 0),
        derivation="pagemap: present pages of shared memory mappings (bit 61), told by their paths in maps: SysV "
                   "segments (/SYSV*), POSIX shared memory (/dev/shm/*), memfds (/memfd:*), anonymous MAP_SHARED "
                   "memory (/dev/zero (deleted)); each process that maps a page counts it in its RSS, its PSS "
                   "splits it among them",
        source="maps, pagemap",
        detail={**{kind: owned.shmem_kinds.get(kind, 0) for kind in ("sysv", "posix", "memfd", "anonymous")},
                "mappings": owned.count.get("shmem", 0)},
    )
    stacks = Layer(
        "stacks", owned("stack"), virtual=owned.virtual.get("stack", 0),
        derivation="pagemap: resident pages of [stack], of each glibc thread stack (found by the struct pthread "
                   "at its top) and of the mapping under each blocked thread's stack pointer",
        source="struct pthread, stack pointers, pagemap",
        detail={"count": owned.count.get("stack", 0)},
    )
    return files, shared_memory, stacks


def _gpu_layers(m: Measurements, owned: _Owners) -> dict[str, Layer]:
    """gpu_driver and pinned_host where the process maps the GPU driver's device files (none otherwise:
    a process without a GPU context shows no such layer), each saying how sure its name is."""
    if not owned.count.get(GPU_DRIVER) and not owned.count.get(PINNED_LIKELY):
        return {}
    devices: dict[str, int] = {}
    for r in m.regions:
        if r.owner == GPU_DRIVER:
            devices[r.path] = devices.get(r.path, 0) + r.resident
    driver = Layer(
        "gpu_driver", owned(GPU_DRIVER), virtual=owned.virtual.get(GPU_DRIVER, 0),
        derivation="pagemap: present pages of mappings of the GPU driver's device files (/dev/nvidiactl, "
                   "/dev/nvidia0, /dev/nvidia-uvm, ...), told by their paths in maps; entries with no page behind "
                   "them (the GPU's registers and memory window, VM_PFNMAP) count in no RSS and are left out",
        source="maps (/dev/nvidia*), pagemap",
        detail={"confidence": DRIVER_WHY, "mappings": owned.count.get(GPU_DRIVER, 0), "devices": devices,
                # the objects naming CUDA it maps (resident): the lab picks a framework's settings by them
                "libraries": cuda_objects(r.path for r in m.regions if r.path.startswith("/"))},
    )
    pinned = Layer(
        "pinned_host", owned(PINNED_LIKELY), virtual=owned.virtual.get(PINNED_LIKELY, 0),
        derivation="pagemap: present pages of shared anonymous mappings (/dev/zero (deleted)) in a process that uses "
                   "CUDA, taken out of shared_memory; " + PINNED_WHY,
        source="likely: MAP_SHARED in a CUDA process; maps, pagemap",
        detail={"confidence": PINNED_WHY, "mappings": owned.count.get(PINNED_LIKELY, 0)},
    )
    return {"gpu_driver": driver, "pinned_host": pinned}


def _library_layer(m: Measurements, owned: _Owners) -> dict[str, Layer]:
    """library_allocators where a library's own allocator was found holding memory (none otherwise: a process
    without one shows no such layer): the resident pages of its arenas, per allocator and library."""
    if not owned.count.get(LIBRARY_POOL):
        return {}
    by_label: dict[str, list[int]] = {}  # its label -> [resident, reserved, regions (an arena per mapping)]
    for r in m.regions:
        if r.owner == LIBRARY_POOL:
            sizes = by_label.setdefault(r.path, [0, 0, 0])
            sizes[0] += r.resident
            sizes[1] += r.end - r.start
            sizes[2] += 1
    return {"library_allocators": Layer(
        "library_allocators", owned(LIBRARY_POOL), virtual=owned.virtual.get(LIBRARY_POOL, 0),
        derivation="pagemap: resident pages of the arenas of an allocator a library bundles beside malloc's (a "
                   "mimalloc 3 under its prefix, as pyarrow's pool uses), each arena found from outside by its own "
                   "record at its start (its address, its size in 64 KiB slices, its sub-process in the library's "
                   "static data); in use and free together: the allocator's own count of what is in use is the "
                   "library's (pyarrow: default_memory_pool().bytes_allocated())",
        source="arena records, pagemap",
        # a region is labelled "ALLOCATOR in PATH" (explain.snapshot.library_pools): no allocator name has " in "
        detail={"pools": [{"allocator": label.partition(" in ")[0], "library": label.partition(" in ")[2],
                           "resident": sizes[0], "reserved": sizes[1], "regions": sizes[2]}
                          for label, sizes in sorted(by_label.items(), key=lambda item: -item[1][0])]},
        note="what a library's own allocator keeps: released by its own call (pyarrow: "
             "default_memory_pool().release_unused(); `memgap inspect --trim` calls it), not by malloc_trim")}


LARGEST_OBJECTS = 10  # the static data layer's detail lists this many objects, the largest first


def _static_layer(m: Measurements, owned: _Owners) -> Layer:
    """static_data: the loaded objects' zero-filled data (.bss), each object's resident bytes in it."""
    by_object: dict[str, list[int]] = {}  # path -> [from its program headers, likely from the maps]
    for r in m.regions:
        if r.owner in (STATIC_DATA, STATIC_LIKELY):
            by_object.setdefault(r.path, [0, 0])[r.owner == STATIC_LIKELY] += r.resident
    largest = sorted(by_object.items(), key=lambda item: (-sum(item[1]), item[0]))[:LARGEST_OBJECTS]
    likely = owned(STATIC_LIKELY)
    return Layer(
        "static_data", owned(STATIC_DATA) + likely,
        virtual=owned.virtual.get(STATIC_DATA, 0) + owned.virtual.get(STATIC_LIKELY, 0),
        derivation="pagemap: resident pages of each loaded object's zero-filled static data (.bss: the part of a "
                   "PT_LOAD segment beyond its file bytes, p_memsz > p_filesz), placed by its program headers at its "
                   "load address (its mapping at file offset 0 less its first segment's page-aligned p_vaddr)"
                   + (f"; {likely} bytes likely ({LIKELY})" if likely else ""),
        source="ELF program headers, pagemap" + (", maps" if likely else ""),
        detail={"objects": len(by_object), "likely": likely,
                "largest": [{"path": path, "bytes": sum(sizes), "likely": sizes[1]} for path, sizes in largest]},
    )


def _allocator_layers(m: Measurements, c: Share, in_use: int | None, moved: int) -> tuple[Layer, Layer]:
    """allocator_in_use (less Python's large objects, ``moved``) and allocator_free, from its reader."""
    in_use_layer = Layer(
        "allocator_in_use", max(0, in_use) if in_use is not None else None,
        virtual=m.mallinfo.in_use if m.mallinfo else (m.jemalloc.allocated if m.jemalloc else None),
        derivation="; ".join(c.in_use_how) + ("; minus Python's large objects (shown under python_objects)"
                                               if moved else ""),
        source=c.source, note=m.notes.get("allocator_in_use", ""),
    )
    free_layer = Layer(
        "allocator_free", c.free,
        virtual=(sum(a.free for a in m.malloc_info.arenas) if m.malloc_info else None),
        derivation="; ".join(c.free_how), note=m.notes.get("allocator_free", "") or c.note, detail=c.detail,
        source=c.source,
    )
    return in_use_layer, free_layer


def _other_anon_layer(m: Measurements, c: Share, owned: _Owners) -> Layer:
    return Layer(
        "other_anon", c.other_anon + owned("file-cow"),
        derivation="anonymous resident pages no allocator above claims, plus private copies of file pages "
                   "(libraries' data and relocations)",
        source="pagemap, unclaimed",
        detail={"unclaimed_anonymous": c.other_anon, "file_private_copies": owned("file-cow")},
        note=m.notes.get("other_anon", ""),  # e.g. a second allocator's memory, not read
    )


PSS_DERIVATION = ("private: resident pages no other process maps (pagemap bit 56), exact; pss: those plus each "
                  "shared page at its mapping's average (smaps Pss minus the mapping's private bytes, spread "
                  "evenly over its shared pages), so exact for private pages and pro rata within a mapping for "
                  "shared ones")
PRO_RATA = "; a layer counted in bytes within pages it shares with another (blocks in pymalloc arenas, an " \
           "allocator's counters) takes those pages' private and shared parts in proportion"


def _set_shares(layers: dict[str, Layer], parts: dict[str, _Sizes]) -> None:
    """Each measured layer's private, shared and PSS bytes, from the part of the pages it holds."""
    for name, layer in layers.items():
        part = parts[name]
        if layer.resident is None or part.private is None or part.pss is None:
            continue
        layer.private = min(layer.resident, max(0, part.private))
        layer.shared = layer.resident - layer.private
        layer.pss = max(0, round(part.pss))
        pro_rata = PRO_RATA if name in ("python_objects", "pymalloc_free", "allocator_in_use") else ""
        layer.derivation = "; ".join(filter(None, [layer.derivation, PSS_DERIVATION + pro_rata]))

