"""Which figure decides a lab's verdict (pure): the idle at the end, the mean over the work, the peak, or the
GPU's memory at idle.

``--objective`` names it. Without it, a driven workload is judged by the memory it holds while it
works, as a service's chart shows it: a service under ``--load``, or a workload whose baseline
rested again and again during its work (memgap.lab.work: at least BURSTY_RESTS rests of MIN_REST
seconds or more, in most of the baseline's runs). Any other workload is judged by its idle, as
the lab always did; so is a lab whose runs' samples hold no CPU time (recorded before memgap
sampled it), which says nothing about it then (``why`` is ""). A lab that runs a setting of what holds
a GPU's memory (PyTorch's CUDA cache: memgap.runtimes.torch_settings) is judged by the tree's device
memory at idle (NVML, sampled with RSS), where its baseline recorded some: those settings change it,
not RSS. Without a GPU nothing changes.

A remedy that acts only after a quiet spell (memgap's idle trimmer: trim=quiet, and trim=idle as
it is deployed) is said to wait for one the workload never has when every rest its runs had during
their work was shorter than its delay (``quiet_warnings``).
"""
from __future__ import annotations

from memgap.allocators.variants import Variant
from memgap.documents.lab_summary import Spread, VariantSummary
from memgap.documents.records import RunFigures, RunStatus
from memgap.lab.work import BURSTY_RESTS, MIN_REST

OBJECTIVES = ("mean", "idle", "peak", "gpu")
IDLE, MEAN, PEAK, GPU = "idle", "mean", "peak", "gpu"
ASKED = "chosen with --objective"


def words(objective: str) -> str:
    """The figure in words, as the verdict and the tables say it."""
    return {MEAN: "mean over the work", PEAK: "peak", GPU: "GPU memory at idle"}.get(objective, "idle")


def summary_figure(s: VariantSummary, objective: str) -> Spread | None:
    """A variant's (median, min, max) of the figure that decides."""
    return {MEAN: s.mean, PEAK: s.peak, GPU: s.gpu_idle}.get(objective, s.idle)


def run_figure(r: RunFigures, objective: str) -> int | None:
    """One run's figure that decides."""
    return {MEAN: r.work_mean, PEAK: r.peak, GPU: r.gpu_idle}.get(objective, r.idle)


def bursty_runs(runs: list[RunFigures]) -> list[RunFigures]:
    """The runs that rested at least BURSTY_RESTS times during their work."""
    return [r for r in runs if r.rests is not None and len(r.rests) >= BURSTY_RESTS]


def works_in_bursts(base_runs: list[RunFigures]) -> bool:
    """Whether most of the baseline's usable runs rested at least BURSTY_RESTS times during their work."""
    usable = [r for r in base_runs if r.status == RunStatus.OK and r.rests is not None]
    return bool(usable) and 2 * len(bursty_runs(usable)) > len(usable)


def decide_objective(asked: str, load: bool, base_runs: list[RunFigures], device: bool = False) -> tuple[str, str]:
    """(the objective, why) for one cell of a lab, from what was asked and the baseline's runs there;
    ``device``: the lab runs a variant that sets what holds a GPU's memory (Variant.device_memory)."""
    if asked:
        return asked, ASKED
    gpu = [r for r in base_runs if r.status == RunStatus.OK and r.gpu_idle is not None]
    if device and gpu:
        return GPU, (f"the default where a variant sets what holds the GPU's memory (a framework's device cache): "
                     f"it changes device memory, not RSS, and the baseline's runs recorded it ({len(gpu)} of "
                     f"{len(base_runs)}); RSS stays beside it in the table")
    if load:
        return MEAN, "the default for a service under --load: the memory it holds while it serves"
    usable = [r for r in base_runs if r.status == RunStatus.OK and r.rests is not None]
    if not usable:
        return IDLE, ""  # no CPU time sampled (an earlier memgap's lab), or no baseline run yet: as before
    bursty = bursty_runs(usable)
    if 2 * len(bursty) > len(usable):
        rests = [x for r in bursty for x in r.rests or []]
        return MEAN, (f"the default for a workload that works in bursts: the baseline rested {len(rests)} times "
                      f"during its work in {len(bursty)} of {len(usable)} runs ({min(rests):.1f}-{max(rests):.1f} s "
                      f"each), so the memory it holds between its bursts is what it costs")
    return IDLE, (f"the default for a workload that does its work and then rests (fewer than {BURSTY_RESTS} "
                  f"rests of {MIN_REST:g} s or more during the work in most of the baseline's runs)")


def quiet_warnings(variants: list[Variant], runs: list[RunFigures], objective: str) -> dict[str, str]:
    """Per variant that acts only after a quiet spell: what it waits for and the longest rest the
    workload had during its work, where every rest was shorter (the lab's runs of it and of the
    baseline, any cell). A workload that never rested during its work is said to have none only
    where the objective is the work's mean (a batch job's quiet spell is its final rest)."""
    out: dict[str, str] = {}
    for v in variants:
        delay = v.quiet_delay
        mine = [r for r in runs if r.rests is not None and r.status == RunStatus.OK
                and (r.variant == v.spec or _is_baseline(r.variant, variants))]
        if not delay or not mine:
            continue
        rests = [x for r in mine for x in r.rests or []]
        if (rests or objective == MEAN) and max(rests, default=0.0) < delay:
            longest = (f"its longest rest during the work was {max(rests):.1f} s ({len(rests)} rests in "
                       f"{len(mine)} runs)" if rests else f"it did not rest during its work ({len(mine)} runs)")
            out[v.spec] = (f"{v.spec} acts only after {delay:g} s of quiet ({v.quiet_what}), and this workload "
                           f"never has that quiet while it works: {longest}"
                           + ("; its idle figure comes from the final rest, which the workload may never have"
                              if objective == IDLE else ""))
    return out


def _is_baseline(spec: str, variants: list[Variant]) -> bool:
    """Whether ``spec`` is the lab's baseline among ``variants``."""
    return any(v.spec == spec and v.is_baseline for v in variants)
