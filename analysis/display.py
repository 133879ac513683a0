"""The readable versions of the tables: percentages instead of fractions, yes/no instead of
True/False, headers in words, and LaTeX that drops into a paper (a `table` environment with
caption and label, booktabs rules).

The numeric frames of analysis/tables.py are left as they are (figures and W&B read them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import style

LATEX_HEADER = "% needs \\usepackage{booktabs}\n"


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


def yes_no(x: Any) -> str:
    return "yes" if bool(x) else "no"


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
        "ours - paper": [fmt_diff(x, u) for x, u in zip(v["difference"], units)],
        "direction reproduced": [yes_no(x) for x in v["direction_reproduced"]],
        "magnitude reproduced": [yes_no(x) for x in v["magnitude_reproduced"]],
    })


def main_display(tab: pd.DataFrame) -> pd.DataFrame:
    """JCT per workload and scheduler in seconds (workload and scheduler stay config names: the
    regeneration test reads them)."""
    out = pd.DataFrame({"workload": tab["workload"].astype(str), "scheduler": tab["scheduler"]})
    for m in ("jct_mean", "jct_p99"):
        out[f"{style.metric_label(m)} (s)"] = tab[m].map(lambda x: "n/a" if _nan(x) else f"{x:.1f}")
        out[f"{style.metric_label(m)} 95% CI"] = tab[f"{m}_ci"].map(lambda x: "n/a" if _nan(x) else f"±{x:.1f}")
    out["seeds"] = tab["seeds"]
    if "missing" in tab:
        out["missing runs"] = tab["missing"]
    return out


BREAKDOWN_COLUMNS = {
    "jct_mean": "mean JCT (s)", "mean_batch": "mean decode batch", "hit_rate": "prefix hit rate",
    "swap_in_GB": "swap-in (GB)", "swap_out_GB": "swap-out (GB)", "prefill_Mtok": "prefill computed (M tokens)",
    "queue_s_per_call": "queueing per call (s)", "service_s_per_call": "service per call (s)",
}


def breakdown_display(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    out = df.round(2).rename(columns=BREAKDOWN_COLUMNS)
    out["prefix hit rate"] = df["hit_rate"].map(lambda x: f"{100 * x:.1f}%")
    return out


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


def to_markdown(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, floatfmt=".3f", disable_numparse=True)  # cells stay as formatted


def to_latex(df: pd.DataFrame, caption: str, label: str) -> str:
    """A floating `table` with caption and label; strings are escaped, ± becomes $\\pm$."""
    tex = df.to_latex(index=False, escape=True, float_format="%.3f", caption=caption, label=f"tab:{label}",
                      position="htbp")
    return LATEX_HEADER + tex.replace("±", "$\\pm$")


def write_table(out: Path, name: str, df: pd.DataFrame, title: str, note: str = "") -> None:
    """`name`.md (title, note, table) and `name`.tex (the same table, captioned by the title)."""
    out.mkdir(parents=True, exist_ok=True)
    md = f"# {title}\n\n{note}\n\n{to_markdown(df)}\n" if note else f"# {title}\n\n{to_markdown(df)}\n"
    (out / f"{name}.md").write_text(md)
    (out / f"{name}.tex").write_text(to_latex(df, title + ".", name))
