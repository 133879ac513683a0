"""The report's tables, each written twice: `<name>.md` (title, note, table) and `<name>.tex` (for a
paper: analysis/latex.py, captioned with the setup, the seeds and the CI, labelled per grid)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import display, latex, regime, style, tables

CI_TEXT = "Mean over seeds with the 95% Student-t CI half-width"
CLAIMS_NOTE = ("ours = mean over seeds of the paired relative change (TOPAS - best baseline) / best baseline "
               "(ablation: TOPAS vs TOPAS-base); 95% CI = Student-t half-width over seeds (pp: percentage points). "
               "baselines: the paper's set or the full set (with the extra baselines); one row when both sets have the "
               "same best baseline. Verdicts (docs/protocol.md): reproduced = the CI excludes 0 on the paper's side and "
               "ours is at least 2/3 of the paper's; direction only = the CI on the paper's side, the magnitude short; "
               "inconclusive = the CI covers 0, or fewer than 3 seeds; contradicted = the CI excludes 0 on the other side. "
               "The headline counts one verdict per claim, against the paper's baseline set. paper_vs_ours.png draws "
               "this table. The decision-overhead claims are measured in wall-clock time: wallclock/claims_wallclock.md.")


def setup(runs: pd.DataFrame) -> str:
    """The figures' caption line as a sentence: model, GPU, load, seeds, tasks, backend."""
    return style.caption(runs).replace(" | ", "; ")


def grid_of(main_experiment: str) -> str:
    """The grid an experiment name belongs to: main -> default, main_full -> full, main_quick_sglang -> quick_sglang."""
    return main_experiment.removeprefix("main").lstrip("_") or "default"


@dataclass(frozen=True)
class Target:
    """Where the tables go and the grid their LaTeX labels name."""

    out: Path
    grid: str = "default"

    def tag(self, name: str) -> str:
        return latex.label(self.grid, name)

    def write(self, name: str, df: pd.DataFrame, title: str, note: str, tex: str | None) -> None:
        display.write_table(self.out, name, df, title, note, tex)


def main_tables(main: pd.DataFrame, failed: pd.DataFrame, t: Target) -> pd.DataFrame:
    """main_jct.md (every workload x scheduler: JCT and x bound) and its LaTeX, pivoted: main_jct.tex (mean)
    and main_jct_p99.tex (p99)."""
    tab = tables.jct_table(main)
    # a (workload, scheduler) with failed or missing runs says so: its row is over fewer seeds
    lost = failed[failed["workload"].ne("")].groupby(["workload", "scheduler"]).size().rename("missing")
    tab = tab.merge(lost.reset_index(), on=["workload", "scheduler"], how="outer")
    tab["missing"] = tab["missing"].fillna(0).astype(int)
    tab["seeds"] = tab["seeds"].fillna(0).astype(int)
    tab["workload"] = pd.Categorical(tab["workload"], [w for w in tables.WORKLOAD_ORDER if w in set(tab["workload"])]
                                     + sorted(set(tab["workload"]) - set(tables.WORKLOAD_ORDER)))
    tab = tab.sort_values(["workload", "jct_mean"])
    shown = display.main_display(tab)
    where = setup(main)
    note = f"{CI_TEXT}. {display.BOUND_NOTE} {where}."
    if shown["missing runs"].any():
        note += " **Incomplete**: `missing runs` counts runs that failed or never finished (failed_runs.md)."
    incomplete = " Incomplete: some runs failed or are missing (failed_runs)." if shown["missing runs"].any() else ""
    for metric, name in (("jct_mean", "main_jct"), ("jct_p99", "main_jct_p99")):
        label = style.metric_label(metric)
        caption = (f"{label[0].upper()}{label[1:]} per scheduler and workload: JCT (s), the 95% Student-t "
                   f"CI half-width over seeds and JCT / the task's floor (x bound, 1.0 = the physical limit). {where}."
                   f"{incomplete}")
        tex = display.main_latex(tab, metric, caption, t.tag(name))
        if name == "main_jct":
            t.write(name, shown, "Mean and p99 JCT per workload and scheduler (s), and x its floor", note, tex)
        else:
            (t.out / f"{name}.tex").write_text(tex)
    return shown


def breakdown_table(main: pd.DataFrame, schedulers: list[str], t: Target) -> pd.DataFrame:
    df = tables.time_breakdown(main, schedulers)
    if df.empty:
        return df
    where = setup(main[main["scheduler"].isin(schedulers)])
    caption = ("Where the time goes, TOPAS vs the best baselines (mean over seeds): JCT, JCT / floor, mean decode batch, "
               "prefix hit rate, host swap-in / swap-out, prefill tokens computed, and per call the queueing (ready to "
               f"first admission) and service time (first admission to finish). {where}.")
    shown = display.breakdown_display(df)
    t.write("breakdown", shown, "Where the time goes: TOPAS vs the best baselines",
            "Mean over seeds. queueing / service per call: ready -> first admission and first admission -> finish. "
            f"{display.BOUND_NOTE} {where}.", display.breakdown_latex(df, caption, t.tag("breakdown")))
    return shown


def claims_table(verdicts: pd.DataFrame, main: pd.DataFrame, t: Target, missing: Sequence[str] = ()) -> pd.DataFrame:
    """claims.md's head (the headline, every claim with its verdict) and claims.tex. `missing`: the claims without
    runs, named in the headline."""
    shown = display.claims_display(verdicts)
    head = tables.headline(verdicts, missing)
    caption = (f"The paper's claims: paper vs ours ({head}). ours: mean over seeds of the paired change TOPAS vs the best "
               "baseline with its 95% Student-t CI; reproduced = the CI excludes 0 on the paper's side and ours >= 2/3 of "
               "the paper's; direction only = magnitude short; inconclusive = the CI covers 0 or n < 3; contradicted = the "
               f"CI excludes 0 on the other side. {setup(main)}.")
    t.write("claims", shown, "The paper's claims: paper vs ours", f"**{head}** (against the paper's baseline set).\n\n"
            + CLAIMS_NOTE, display.claims_latex(verdicts, caption, t.tag("claims")))
    return shown


REGIME_HEADING = "## Where TOPAS wins, ties and loses (regime map, mean JCT)"


def regime_section(regime_runs: pd.DataFrame) -> str:
    """claims.md's verdict by regime: where TOPAS wins, ties and loses; "" without regime runs."""
    c = regime.cells(regime_runs)
    if c.empty:
        return ""
    return (f"\n{REGIME_HEADING}\n\nCells of the regime map (regime.md, regime.png) per workload; win / loss: the 95% CI "
            "of the paired change vs the cell's best baseline excludes 0. vs a reference row (shown, never a baseline): "
            "TOPAS's wins / ties / losses against it, paired the same way, and its worst cell.\n\n"
            + display.to_markdown(regime.verdict_summary(c)) + "\n")


def failed_table(failed: pd.DataFrame, t: Target) -> None:
    """failed_runs.md/.tex: every run that failed or is missing, with its first error line; removed when none."""
    if failed.empty:
        for ext in ("md", "tex"):
            (t.out / f"failed_runs.{ext}").unlink(missing_ok=True)
        return
    df = failed[["experiment", "job", "status", "error"]]
    title = "Runs that failed or are missing (left out of every table and figure)"
    t.write("failed_runs", df, title,
            "status: failed (the run's error, from its folder's error.txt), missing (never reported: the launcher's or "
            "the sweep's first error line from its log, else killed or aborted), damaged (a file does not match its digest).",
            latex.render(df, f"{title}.", t.tag("failed_runs")))


def fidelity_table(out: Path, t: Target) -> pd.DataFrame:
    """fidelity.tex and fidelity_differences.tex from fidelity.json (written by `make fidelity`); empty without it."""
    path = out / "fidelity" / "fidelity.json"
    if not path.exists():
        return pd.DataFrame()
    result = json.loads(path.read_text())
    fidelity_differences_table(result, out, t)
    tab = display.fidelity_display(result)
    # a two-level header for the paper: "mean JCT real (s)" -> ("mean JCT", "real (s)")
    paper = tab.set_axis([tuple(c.split(" JCT ")) if " JCT " in c else ("", c) for c in tab.columns], axis=1)
    paper.columns = [(f"{a} JCT", b) if a else (a, b) for a, b in paper.columns]
    (out / "fidelity" / "fidelity.tex").write_text(latex.render(
        paper, right=[c for c in paper.columns if c[1] not in ("workload", "policy")], caption="Simulator fidelity: the "
        "simulator vs the real SGLang server on identical traces (errors (sim - real) / real; noise: the real server's "
        "run-to-run spread over the repeats; machine speed: the profile's scale in each real run).", tag=t.tag("fidelity")))
    return tab


def fidelity_differences_table(result: dict, out: Path, t: Target) -> pd.DataFrame:
    """fidelity_differences.tex from fidelity.json's `differences` (topas/fidelity/differences.py); removed when the
    result has none (an older fidelity.json), so no stale table stays beside a new one."""
    path = out / "fidelity" / "fidelity_differences.tex"
    tab = display.fidelity_differences_display(result)
    if tab.empty:
        path.unlink(missing_ok=True)
        return tab
    path.write_text(latex.render(
        tab, right=[c for c in tab.columns if c not in ("workload", "policy", "vs", "inside CI", "same sign")],
        caption="Simulator fidelity of the differences between schedulers: the paired change of mean JCT (X - B) / B "
        "vs FCFS and vs the best baseline, repeat k with repeat k (same trace); real: mean over the repeats with "
        "its 95% Student-t half-width (pp); sim: the simulator at each real run's machine speed (scaled) and on the "
        "profile as measured; inside CI: the scaled change lies within the real CI; repeats (needed): used, and "
        "needed for a 10% difference to exclude 0 at that row's noise.", tag=t.tag("fidelity_differences")))
    return tab


def regime_table(df: pd.DataFrame, t: Target) -> pd.DataFrame:
    """regime.md / regime.tex; the readable table (empty without runs)."""
    c = regime.cells(df)
    if c.empty:
        return c
    tab = regime.readable_table(c)
    caption = ("Regime map: TOPAS vs the best baseline per workload, host tier, KV pool and load: the paired change of mean "
               "and p99 JCT, its 95% Student-t CI and the verdict (win / loss: the CI excludes 0). " + setup(df) + ".")
    t.write("regime", tab, "Regime map: TOPAS vs the best baseline per workload, host tier, KV pool and load",
            regime.table_note(df), regime.latex_table(c, caption, t.tag("regime")))
    return tab


def real_vs_sim(exp_dir: Path, out: Path) -> bool:
    """real_vs_sim.md: every real run's measurement beside the simulator's prediction of the same
    trace (its sim_prediction.json, written by the placement worker: topas/prediction.py); False when no real
    run has one."""
    rows = []
    for f in sorted(exp_dir.glob("**/sim_prediction.json")):
        if not (f.parent / "summary.json").exists():
            continue
        s = {**json.loads((f.parent / "summary.json").read_text()), **json.loads(f.read_text())}
        rows.append({"workload": s.get("workload"), "scheduler": s.get("scheduler"), "seed": s.get("seed"),
                     "JCT real (s)": s.get("jct_mean"), "JCT sim (s)": s.get("sim_jct_mean"),
                     "makespan real (s)": s.get("makespan_s"), "makespan sim (s)": s.get("sim_makespan_s"),
                     "sim latency": s.get("sim_latency"), "token scale": s.get("token_scale")})
    if not rows:
        return False
    df = pd.DataFrame(rows).sort_values(["workload", "scheduler", "seed"])
    df["JCT sim/real"] = df["JCT sim (s)"] / df["JCT real (s)"]
    out.mkdir(parents=True, exist_ok=True)
    note = ("Each real run (its summary.json) beside the simulator's prediction of the same scaled trace, model, GPU "
            "and policy (sim latency: the latency model used; on CPU the measured tiny-model profile of `make fidelity`).")
    (out / "real_vs_sim.md").write_text(
        "# Real engine vs the simulator's prediction, per run\n\n" + df.to_markdown(index=False, floatfmt=".3g")
        + f"\n\n{note}\n")
    return True
