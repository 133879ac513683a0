"""Fidelity of differences: does the simulator reproduce the differences between schedulers that the real server
shows? The harness's verdicts rest on paired changes between schedulers (TOPAS vs the best baseline), not on any
one cell's absolute JCT, and the real server's run-to-run noise (up to ~46% here) is larger than most per-cell
errors, so a per-cell error says little about whether the simulator ranks the schedulers right.

Per (workload, policy), against FCFS and against the cell's best baseline (the baseline, i.e. not TOPAS nor one
of its `topas_*` ablations, with the lowest real mean JCT, the policy itself left out):

- real: per repeat k, (X_k - B_k) / B_k (repeat k of every scheduler replays the same trace, so the pair shares
  the trace and roughly the machine's state); their mean and 95% Student-t half-width over the repeats
  (analysis.tables.ci95, the claims' CI);
- sim (scaled): the same paired change on the simulator runs scaled to each real run's machine speed, averaged;
- sim (profile): the change between the two simulator runs on the profile as measured;
- `inside`: the simulated change lies within the real CI; `same_sign`: it points the same way as the real mean.

`repeats_needed` says how many repeats a 10% difference needs to be told from 0 at the noise observed.
Pure functions of numbers: validate.py reads them from the run folders, report.py renders them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scipy import stats

from analysis.tables import ci95
from topas.scheduler_sets import baselines

REFERENCE = "fcfs"
Jcts = Mapping[str, Mapping[str, Sequence[float]]]  # workload -> scheduler -> per-repeat mean JCTs


@dataclass(frozen=True)
class Difference:
    """The paired change of mean JCT of `policy` vs `vs` in one workload, real and simulated."""

    workload: str
    policy: str
    vs: str
    kind: str  # "fcfs", "best" or "fcfs = best" (FCFS is the best baseline: one row for both)
    real: float  # mean over the repeats of (X_k - B_k) / B_k
    real_ci: float  # its 95% Student-t half-width (NaN below 2 repeats)
    n: int  # repeats paired
    sd: float  # sd of the paired changes: the noise a difference is measured against
    needed: int | None  # repeats for a 10% difference to exclude 0 at this noise
    sim_scaled: float  # the same paired change on the simulator scaled to each run's machine speed, mean
    sim_profile: float  # the change between the simulator runs on the profile as measured
    inside: bool | None  # sim_scaled within real +- real_ci (None: no CI)
    same_sign: bool | None  # sim_scaled points the same way as real (None: either is missing)
    inside_profile: bool | None
    same_sign_profile: bool | None
    real_changes: list[float] = field(default_factory=list)  # per repeat, for a reader to redo the statistics


def _ok(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


def paired_changes(xs: Sequence[float], bs: Sequence[float]) -> list[float]:
    """(x_k - b_k) / b_k per repeat k present on both sides (a missing or zero b_k drops the pair)."""
    return [(x - b) / b for x, b in zip(xs, bs) if _ok(x) and _ok(b) and b != 0]


def mean_ci(changes: Sequence[float]) -> tuple[float, float, float]:
    """Mean, 95% Student-t half-width and sd of paired changes (NaN where undefined)."""
    if not changes:
        return math.nan, math.nan, math.nan
    sd = statistics.stdev(changes) if len(changes) > 1 else math.nan
    return statistics.fmean(changes), ci95(list(changes)), sd


def change(x: float, b: float) -> float:
    return (x - b) / b if _ok(x) and _ok(b) and b != 0 else math.nan


def best_baseline(real: Mapping[str, Sequence[float]], exclude: str) -> str | None:
    """The baseline (topas.scheduler_sets: not TOPAS, an ablation or a reference row) with the lowest real mean JCT
    over its repeats, `exclude` left out; None when there is none."""
    means = {s: statistics.fmean(v) for s, xs in real.items()
             if s != exclude and s in baselines("full") and (v := [x for x in xs if _ok(x)])}
    return min(means, key=means.get) if means else None


def inside(sim: float, real: float, ci: float) -> bool | None:
    """Whether `sim` lies within real +- ci (None when either is undefined)."""
    return abs(sim - real) <= ci if _ok(sim) and _ok(real) and _ok(ci) else None


def same_sign(sim: float, real: float) -> bool | None:
    """Whether both point the same way (0 only matches 0; None when either is undefined)."""
    return ((sim > 0) == (real > 0) and (sim < 0) == (real < 0)) if _ok(sim) and _ok(real) else None


def repeats_needed(noise_sd_rel: float, effect: float = 0.10, max_n: int = 1000) -> int | None:
    """The fewest repeats n (>= 2) for which a paired difference of `effect` has a 95% Student-t CI excluding 0,
    given the sd of the paired differences: t(0.975, n-1) * sd / sqrt(n) < effect. None for an unknown sd;
    `max_n` when even that many do not suffice."""
    if not _ok(noise_sd_rel):
        return None
    for n in range(2, max_n + 1):
        if stats.t.ppf(0.975, n - 1) * noise_sd_rel / math.sqrt(n) < effect:
            return n
    return max_n


def difference(workload: str, policy: str, vs: str, kind: str, real: Mapping[str, Sequence[float]],
               scaled: Mapping[str, Sequence[float]], profile: Mapping[str, float]) -> Difference:
    """One row: `policy` vs `vs` in `workload`."""
    ch = paired_changes(real[policy], real[vs])
    m, ci, sd = mean_ci(ch)
    sim_ch = paired_changes(scaled.get(policy, ()), scaled.get(vs, ()))
    sim = statistics.fmean(sim_ch) if sim_ch else math.nan
    prof = change(profile.get(policy, math.nan), profile.get(vs, math.nan))
    return Difference(workload, policy, vs, kind, m, ci, len(ch), sd, repeats_needed(sd), sim, prof,
                      inside(sim, m, ci), same_sign(sim, m), inside(prof, m, ci), same_sign(prof, m), ch)


def policy_rows(workload: str, policy: str, real: Mapping[str, Sequence[float]], scaled: Mapping[str, Sequence[float]],
                profile: Mapping[str, float], reference: str = REFERENCE) -> list[Difference]:
    """`policy` vs FCFS and vs its best baseline (one row when that is FCFS)."""
    best = best_baseline(real, exclude=policy)
    targets = []
    if policy != reference and reference in real:
        targets.append((reference, "fcfs = best" if best == reference else "fcfs"))
    if best is not None and best != reference:
        targets.append((best, "best"))
    return [difference(workload, policy, vs, kind, real, scaled, profile) for vs, kind in targets]


def differences(real: Jcts, scaled: Jcts, profile: Mapping[str, Mapping[str, float]],
                reference: str = REFERENCE) -> list[Difference]:
    """Every (workload, policy) vs FCFS and vs its best baseline, in the inputs' order."""
    return [row for w, cell in real.items() for p in cell
            for row in policy_rows(w, p, cell, scaled.get(w, {}), profile.get(w, {}), reference)]


def noise(sds: Iterable[float | None]) -> tuple[float, float]:
    """Median and largest of the rows' sds of the paired changes (NaN without any)."""
    xs = [x for x in sds if _ok(x)]
    return (statistics.median(xs), max(xs)) if xs else (math.nan, math.nan)
