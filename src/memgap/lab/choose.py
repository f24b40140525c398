"""The default variant set follows what the baseline showed: after the baseline's first
run (of each cell), the findings on its processes (their snapshots', the run's, and what
the lab's probe read of its tree: memgap.lab.fork_probe) and the allocator it ran on pick
variants to add, each with the reason the lab document keeps (``LabDocument.chosen``).

Pure: findings and words in, specs and reasons out. One table per kind of evidence, so a
new finding code is one line of ``FINDING_VARIANTS``. A runtime's own settings (Go's, the JVM's,
Node's) are its settings module's, asked of the runtimes' registry by the runtime's name: nothing
here names a runtime.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from memgap.allocators.registry import reader_for
from memgap.allocators.variants import Variant, parse_variant
from memgap.documents.lab_summary import CHOSEN
from memgap.documents.records import RunDocument, finding_of
from memgap.documents.snapshot import Finding

DEFAULT_REASON = "the default set"
NAMED_REASON = "named with --variant"
BASELINE_REASON = "the baseline: every other variant is measured against it"

# A finding's code -> the variants it points to. What each tries:
# - copied-from-parent: forked workers copied their master's pages (memgap.explain.cow): the collector
#   frozen at each fork, so a worker's collections stop writing into (and copying) shared objects
# - glibc-retention, many-arenas: free memory glibc keeps in its arenas: fewer arenas (arena caps),
#   and with two, blocks from 64 KiB up served by mmap, given back to the system when freed (the
#   threshold alone: the default set's 128 KiB idled within 1 MiB of 64 KiB's on the thread pool)
# - glibc-fragmentation: free memory a trim cannot give back: the same, the lower threshold alone
#   (blocks served by mmap leave no holes in a heap), and an allocator that returns its free pages
#   on its own (jemalloc with a 1 s decay)
# - torch-cache-retained: PyTorch's CUDA cache holding much more device memory than its tensors use: segments
#   that grow and shrink in place, so freed memory is not stranded in split blocks (memgap.runtimes.torch_settings)
FINDING_VARIANTS: dict[str, tuple[str, ...]] = {
    "copied-from-parent": ("glibc:gc=freeze-at-fork",),
    "glibc-retention": ("glibc:arena_max=2", "glibc:arena_max=1", "glibc:arena_max=2,mmap_threshold=65536"),
    "many-arenas": ("glibc:arena_max=2", "glibc:arena_max=1"),
    "glibc-fragmentation": ("glibc:arena_max=2", "glibc:arena_max=1", "glibc:mmap_threshold=65536",
                            "glibc:arena_max=2,mmap_threshold=65536",
                            "jemalloc:background_thread=true,dirty_decay_ms=1000"),
    "torch-cache-retained": ("torch:expandable_segments=True",),
}

# The allocator the workload already runs on -> its own settings for giving memory back: each reader's
# ``own_variants`` (memgap.allocators: jemalloc's decay times, tcmalloc's release rate)


# Finding codes about a runtime's own heap: they add the variants of the runtimes the baseline ran
# (memgap.runtimes.runtime_variants); a baseline seen running a runtime gets them without the finding too
RUNTIME_FINDINGS = ("runtime-heap-retained",)


def first_reasons(variants: Iterable[Variant], default_set: bool) -> dict[str, str]:
    """Why each variant of a lab's first lineup runs: the baseline, the default set, or named."""
    return {v.spec: BASELINE_REASON if v.is_baseline else DEFAULT_REASON if default_set else NAMED_REASON
            for v in variants}


@dataclass(frozen=True)
class Choice:
    """A variant the baseline's findings point to, and why."""

    spec: str
    reason: str


def choose(findings: Iterable[Finding], allocators: Collection[str], python: bool,
           runtimes: Collection[str] = (), peak: int | None = None,
           libraries: Collection[str] = ()) -> list[Choice]:
    """The variants the baseline's evidence points to, in the tables' order, each once (the
    first reason that named it): ``findings`` on its processes, ``allocators`` the ones its
    processes ran on, ``python`` whether it ran Python (else Python's settings are left out),
    ``runtimes`` the runtimes whose heaps its snapshots read (memgap.runtimes' names), ``peak``
    its peak RSS (a runtime's setting may be sized from it), ``libraries`` the objects in which its
    snapshots found an allocator beside malloc's, or that a process with a CUDA context mapped (a library's
    own pool settings: Arrow's, PyTorch's CUDA cache's)."""
    from memgap.runtimes import library_settings, runtime_variants  # the settings modules, not the readers

    out: dict[str, str] = {}
    seen: set[str] = set()
    for f in findings:
        if f.code in seen or (f.code not in FINDING_VARIANTS and f.code not in RUNTIME_FINDINGS):
            continue
        seen.add(f.code)
        specs = FINDING_VARIANTS.get(f.code) or [s for name in sorted(runtimes) for s in runtime_variants(name, peak)]
        for spec in specs:
            out.setdefault(spec, f"finding {f.code}: {f.summary}")
    for name in sorted(allocators):
        for spec in reader_for(name).own_variants:
            out.setdefault(spec, f"the workload runs on {name}: its own settings for giving memory back")
    for name in sorted(runtimes):
        for spec in runtime_variants(name, peak):
            out.setdefault(spec, f"the workload runs on the {name} runtime: its own settings for its heap")
    for path in sorted(libraries):
        settings = library_settings(path)
        if settings is None:
            continue
        for spec in settings.variants(peak):
            out.setdefault(spec, f"{os.path.basename(path)} {settings.found}")
    return [Choice(spec, why) for spec, why in out.items() if python or not parse_variant(spec).python_only]


def add_choices(choices: Sequence[Choice], chosen: dict[str, str]) -> list[str]:
    """Record each choice's reason in ``chosen`` (spec -> why it runs); returns the specs that
    are new to the lab. A variant the lab already runs keeps its place, its reason says the
    finding points to it too (once)."""
    new = []
    for c in choices:
        why = CHOSEN + c.reason
        if c.spec not in chosen:
            chosen[c.spec] = why
            new.append(c.spec)
        elif why not in chosen[c.spec] and chosen[c.spec] == DEFAULT_REASON:
            chosen[c.spec] = f"{DEFAULT_REASON}; {why}"
    return new


def run_evidence(run: RunDocument) -> tuple[list[Finding], set[str]]:
    """The findings on a run's processes (the run's own over its phases, then each snapshot's,
    the latest first: a reason quotes the state nearest the rest) and the allocators that
    served their malloc."""
    findings = [finding_of(f) for f in run.findings]
    allocators: set[str] = set()
    for p in run.processes:
        for snap in reversed(p.snapshots):
            findings.extend(finding_of(f) for f in snap.get("findings") or [])
            name = (snap.get("allocator") or {}).get("name")
            if name:
                allocators.add(str(name))
    return findings, allocators


def run_libraries(run: RunDocument) -> set[str]:
    """The objects in which a run's snapshots found an allocator beside the one serving malloc (a library's
    own, as libarrow's mimalloc), by path; and the objects naming CUDA that a process with a CUDA context
    mapped (its gpu_driver layer's ``libraries``: PyTorch's libc10_cuda.so), by file name."""
    paths: set[str] = set()
    for p in run.processes:
        for snap in [*p.snapshots, *([p.peak] if p.peak else [])]:
            found = (snap.get("allocator") or {}).get("found")
            for f in found if isinstance(found, list) else []:
                if isinstance(f, dict) and not f.get("serves_malloc") and f.get("library"):
                    paths.add(str(f["library"]))
            driver = (snap.get("layers") or {}).get("gpu_driver") or {}
            cuda = (driver.get("detail") or {}).get("libraries")
            paths.update(str(name) for name in (cuda if isinstance(cuda, list) else []))
    return paths


def run_runtimes(run: RunDocument) -> set[str]:
    """The runtimes whose heaps a run's snapshots read (their runtime_heap layer's, by name)."""
    names: set[str] = set()
    for p in run.processes:
        for snap in p.snapshots:
            layer = snap.get("layers", {}).get("runtime_heap")
            runtimes = layer.get("detail", {}).get("runtimes") if layer else None  # runtimes.layers' detail
            for rt in runtimes if isinstance(runtimes, list) else []:
                if isinstance(rt, dict) and rt.get("runtime"):
                    names.add(str(rt["runtime"]))
    return names
