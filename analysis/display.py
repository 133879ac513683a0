"""The readable versions of the tables: percentages instead of fractions, verdicts in words,
headers in words (Markdown), and their LaTeX versions (analysis/latex.py: numbers in siunitx
columns, so those frames stay numeric).

The numeric frames of analysis/tables.py are left as they are (figures and W&B read them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import latex, style


def _nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_value(x: float, unit: str = "change") -> str:
    """A claim's value: change -> signed percent, share -> percent, ms, ratio -> 0.45x."""
    if _nan(x):
        return "n/a"
    return {"change": lambda: f"{100 * x:+.1f}%", "share": lambda: f"{100 * x:.2g}%", "ms": lambda: f"{x:.3g} ms",
            "ratio": lambda: f"{x:.2f}x"}.get(unit, lambda: f"{x:.4g}")()


def fmt_ci(ci: float, unit: str = "change") -> str:
    """A CI half-width in the claim's unit (percentage points for changes and shares)."""
    if _nan(ci):
        return "n/a"
    return "±" + {"change": lambda: f"{100 * ci:.1f} pp", "share": lambda: f"{100 * ci:.2g} pp",
                  "ms": lambda: f"{ci:.2g} ms", "ratio": lambda: f"{ci:.2f}"}.get(unit, lambda: f"{ci:.3g}")()


def fmt_diff(d: float, unit: str = "change") -> str:
    if _nan(d):
        return "n/a"
    return {"change": lambda: f"{100 * d:+.1f} pp", "share": lambda: f"{100 * d:+.2g} pp",
            "ms": lambda: f"{d:+.3g} ms", "ratio": lambda: f"{d:+.2f}"}.get(unit, lambda: f"{d:+.3g}")()


def claim_title(row: Mapping[str, Any]) -> str:
    """'DAG-4, mean JCT' for a claim row."""
    w = style.workload_label(row.get("workload", "") or "")
    title = f"{w}, {style.metric_label(row['metric'])}" if w else style.metric_label(row["metric"])
    return f"ablation: {title}" if str(row.get("claim", "")).startswith("ablation") else title


def claims_display(v: pd.DataFrame) -> pd.DataFrame:
    """The verdicts table as people read it."""
    if v.empty:
        return v
    units = v["unit"] if "unit" in v else pd.Series("change", index=v.index)
    return pd.DataFrame({
        "claim": v["claim"], "workload": [style.workload_label(w) if w else "" for w in v["workload"]],
        "metric": [style.metric_label(m) for m in v["metric"]], "baselines": v["baseline_set"],
        "vs": [style.label(s) if s else "" for s in v["vs"]],
        "paper": [fmt_value(x, u) for x, u in zip(v["paper"], units)],
        "ours": [fmt_value(x, u) for x, u in zip(v["ours"], units)],
        "95% CI": [fmt_ci(x, u) for x, u in zip(v["ci95"], units)], "seeds": v["seeds"],
        "ours - paper": [fmt_diff(x, u) for x, u in zip(v["difference"], units)], "verdict": v["verdict"],
    })


def claims_latex(v: pd.DataFrame, caption: str, tag: str) -> str:
    """The verdicts table for a paper: one line per claim and baseline set; values in the claim's unit."""
    units = v["unit"] if "unit" in v else pd.Series("change", index=v.index)
    vs = [f"{style.label(s)}" + (" (full set)" if b == "full set" else "") if s else "" for s, b in zip(v["vs"], v["baseline_set"])]
    tab = pd.DataFrame({"claim": [claim_title(r) for _, r in v.iterrows()], "vs": vs,
                        "paper": [fmt_value(x, u) for x, u in zip(v["paper"], units)],
                        "ours": [fmt_value(x, u) for x, u in zip(v["ours"], units)],
                        "95% CI": [fmt_ci(x, u) for x, u in zip(v["ci95"], units)], "n": v["seeds"].astype(float),
                        "verdict": v["verdict"]})
    return latex.render(tab, caption, tag, digits={"n": 0}, right=["paper", "ours", "95% CI"])


def _num(x: float, fmt: str) -> str:
    return "n/a" if _nan(x) else format(x, fmt)


BOUND_NOTE = ("x bound: JCT / the task's floor (its batch-1 critical path on the run's latency model, topas/bound.py, "
              "docs/bound.md), mean over the run's tasks (and its p99), then over seeds: 1.0 is the physical limit.")


def main_display(tab: pd.DataFrame) -> pd.DataFrame:
    """JCT per workload and scheduler in seconds and x its floor (workload and scheduler stay config
    names: the regeneration test reads them)."""
    out = pd.DataFrame({"workload": tab["workload"].astype(str), "scheduler": tab["scheduler"]})
    for m in ("jct_mean", "jct_p99"):
        out[f"{style.metric_label(m)} (s)"] = tab[m].map(lambda x: _num(x, ".1f"))
        out[f"{style.metric_label(m)} 95% CI"] = tab[f"{m}_ci"].map(lambda x: "n/a" if _nan(x) else f"±{x:.1f}")
    for m, name in (("jct_over_bound_mean", "x bound (mean)"), ("jct_over_bound_p99", "x bound (p99)")):
        out[name] = tab[m].map(lambda x: _num(x, ".2f")) if m in tab else "n/a"
    out["seeds"] = tab["seeds"]
    if "missing" in tab:
        out["missing runs"] = tab["missing"]
    return out


def main_latex(tab: pd.DataFrame, metric: str, caption: str, tag: str) -> str:
    """The main table pivoted for a paper: a row per scheduler, per workload the JCT (s), its CI and x bound."""
    bound = {"jct_mean": "jct_over_bound_mean", "jct_p99": "jct_over_bound_p99"}[metric]
    tab = tab.assign(**{bound: tab[bound] if bound in tab else float("nan")})
    ws = list(dict.fromkeys(tab["workload"].astype(str)))
    rows = []
    for sched in style.ordered(tab["scheduler"]):
        row: dict[Any, Any] = {("", "scheduler"): style.label(sched)}
        for w in ws:
            r = tab[(tab["workload"].astype(str) == w) & (tab["scheduler"] == sched)]
            get = (lambda c, r=r: float(r[c].iloc[0]) if len(r) else float("nan"))
            row |= {(style.workload_label(w), "s"): get(metric), (style.workload_label(w), "±CI"): get(f"{metric}_ci"),
                    (style.workload_label(w), "×bound"): get(bound)}
        rows.append(row)
    out = pd.DataFrame(rows)
    digits = {c: (2 if c[1] == "×bound" else 1) for c in out.columns if c[1] != "scheduler"}
    return latex.render(out, caption, tag, digits)


BREAKDOWN_COLUMNS = {
    "jct_mean": "mean JCT (s)", "jct_over_bound_mean": "x bound", "mean_batch": "mean decode batch", "hit_rate": "prefix hit rate",
    "swap_in_GB": "swap-in (GB)", "swap_out_GB": "swap-out (GB)", "prefill_Mtok": "prefill computed (M tokens)",
    "queue_s_per_call": "queueing per call (s)", "service_s_per_call": "service per call (s)",
}


def breakdown_display(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    out = df.round(2).rename(columns=BREAKDOWN_COLUMNS)
    out["prefix hit rate"] = df["hit_rate"].map(lambda x: f"{100 * x:.1f}%")
    return out


# the breakdown's LaTeX headers: short, the units in the caption
BREAKDOWN_LATEX = {"jct_mean": "JCT (s)", "jct_over_bound_mean": "×bound", "mean_batch": "batch", "hit_rate": "hit (%)",
                   "swap_in_GB": "in (GB)", "swap_out_GB": "out (GB)", "prefill_Mtok": "prefill (Mtok)",
                   "queue_s_per_call": "queue (s)", "service_s_per_call": "service (s)"}


def breakdown_latex(df: pd.DataFrame, caption: str, tag: str) -> str:
    out = df.assign(hit_rate=100 * df["hit_rate"], workload=[style.workload_label(w) for w in df["workload"]],
                    scheduler=[style.label(s) for s in df["scheduler"]])
    out = out[["workload", "scheduler", *[c for c in BREAKDOWN_LATEX if c in out]]].rename(columns=BREAKDOWN_LATEX)
    return latex.render(out, caption, tag, {c: (1 if c == "hit (%)" else 2) for c in out.columns[2:]})


def fidelity_display(result: Mapping[str, Any]) -> pd.DataFrame:
    """The fidelity table (topas/fidelity/report.py's main table) from fidelity.json."""
    rows = []
    for c in result.get("cells", []):
        m = c["metrics"]
        f = [x["decode"] for x in c.get("speed_factors", [])]
        rows.append({
            "workload": style.workload_label(c["workload"]), "policy": style.label(c["scheduler"]),
            "mean JCT real (s)": f"{m['jct_mean']['real']:.3f}", "mean JCT noise": f"{m['jct_mean']['noise']:.1%}",
            "mean JCT err (profile)": f"{m['jct_mean']['err']:+.1%}",
            "mean JCT err (scaled)": f"{m['jct_mean'].get('err_scaled', float('nan')):+.1%}",
            "p99 JCT real (s)": f"{m['jct_p99']['real']:.3f}", "p99 JCT noise": f"{m['jct_p99']['noise']:.1%}",
            "p99 JCT err (profile)": f"{m['jct_p99']['err']:+.1%}",
            "p99 JCT err (scaled)": f"{m['jct_p99'].get('err_scaled', float('nan')):+.1%}",
            "machine speed": f"x{min(f):.2f}-{max(f):.2f}" if f else "n/a",
        })
    return pd.DataFrame(rows)


def _yes(x: bool | None) -> str:
    return "n/a" if x is None else "yes" if x else "no"


def _vs(row: Mapping[str, Any], name) -> str:
    """'fcfs', 'best: lpm' or 'fcfs (best)' (topas/fidelity/differences.py's `kind`)."""
    return {"best": f"best: {name(row['vs'])}", "fcfs = best": f"{name(row['vs'])} (best)"}.get(row["kind"], name(row["vs"]))


def fidelity_differences_display(result: Mapping[str, Any], readable: bool = True) -> pd.DataFrame:
    """fidelity.json's `differences` (paired changes of mean JCT between schedulers, real and simulated) as a
    table; `readable`: workload and scheduler labels instead of config names."""
    wl, name = (style.workload_label, style.label) if readable else (str, str)
    return pd.DataFrame([{
        "workload": wl(d["workload"]), "policy": name(d["policy"]), "vs": _vs(d, name),
        "real change (95% CI)": f"{fmt_value(d['real'])} {fmt_ci(d['real_ci'])}",
        "sim change (scaled)": fmt_value(d["sim_scaled"]), "sim change (profile)": fmt_value(d["sim_profile"]),
        "inside CI": _yes(d["inside"]), "same sign": _yes(d["same_sign"]),
        "repeats (needed)": f"{d['n']} ({d['needed'] if d.get('needed') is not None else 'n/a'})",
    } for d in result.get("differences", [])])


def to_markdown(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, floatfmt=".3f", disable_numparse=True)  # cells stay as formatted


def write_table(out: Path, name: str, df: pd.DataFrame, title: str, note: str = "", tex: str | None = None) -> None:
    """`name`.md (title, note, table) and, given its LaTeX (`tex`), `name`.tex."""
    out.mkdir(parents=True, exist_ok=True)
    md = f"# {title}\n\n{note}\n\n{to_markdown(df)}\n" if note else f"# {title}\n\n{to_markdown(df)}\n"
    (out / f"{name}.md").write_text(md)
    if tex is not None:
        (out / f"{name}.tex").write_text(tex)


def split_sections(text: str) -> dict[str, str]:
    """A markdown file's parts by heading: its head (everything before the first `## ` line) under "", then
    each `## ` section under its heading line, with the blank line before it; joined in order, the text."""
    out: dict[str, str] = {}
    heading, buf = "", []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            lead = [buf.pop()] if buf and buf[-1] == "\n" else []
            if heading or "".join(buf).strip():
                out[heading] = "".join(buf)
            heading, buf = line.rstrip("\n"), lead
        buf.append(line)
    if heading or "".join(buf).strip():
        out[heading] = "".join(buf)
    return out


def assemble_sections(path: Path, made: Sequence[tuple[str, str]], kept: Mapping[str, str]) -> None:
    """Write `path` from its parts in the order of `made` ((heading, text); the head's heading is ""): each part
    this report made, else the part `kept` (`split_sections` of the file before this report) has under that
    heading. A grid is regenerated one experiment at a time, so a part whose experiment has no runs here is its
    last regeneration's, not dropped (the Provenance part says which code made it). Without a head, nothing."""
    parts = [text or kept.get(heading, "") for heading, text in made]
    if parts and parts[0]:
        path.write_text("".join(parts))
