"""The fidelity figure (`make fidelity`, topas/fidelity/report.py): simulated vs real JCT per task,
in the project's style (analysis/style.py: one colour per scheduler, readable names, a caption)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import style
from analysis.figures import finish, new_figure
from analysis.load import task_jct


def fidelity_jct(result: Mapping[str, Any]) -> Figure | None:
    """Per workload: each task's JCT on the simulator against the real server (filled: the profile scaled to the
    run's machine speed; crosses: the profile as measured), the y = x line."""
    cells = result.get("cells") or []
    if not cells:
        return None
    workloads = list(dict.fromkeys(c["workload"] for c in cells))
    fig = new_figure(3.6 * len(workloads) + 1.8, 3.6)
    axes = fig.subplots(1, len(workloads), squeeze=False)[0]
    for ax, w in zip(axes, workloads):
        hi = 0.0
        for c in (c for c in cells if c["workload"] == w):
            color = style.color(c["scheduler"])
            for k, rd in enumerate(c["real_dirs"]):
                real = task_jct(rd)
                if c.get("sim_scaled_dirs"):
                    ax.scatter(real, task_jct(c["sim_scaled_dirs"][k]).reindex(real.index), s=14, alpha=0.7, color=color)
                raw = task_jct(c["sim_dir"]).reindex(real.index)
                ax.scatter(real, raw, s=14, marker="x", alpha=0.35, color=color)
                hi = max(hi, float(real.max()), float(raw.max()))
        ax.plot([0, hi * 1.05], [0, hi * 1.05], color="black", lw=1)
        ax.set(xlim=(0, hi * 1.05), ylim=(0, hi * 1.05), title=f"{style.workload_label(w)}: JCT per task",
               xlabel="real SGLang server (s)", ylabel="simulator (s)" if ax is axes[0] else "")
    scheds = style.ordered({c["scheduler"] for c in cells})
    handles = [Line2D([], [], marker="o", ls="", color=style.color(s), label=style.label(s)) for s in scheds]
    handles += [Line2D([], [], marker="o", ls="", color="0.4", label="simulator, profile at\nthe run's machine speed"),
                Line2D([], [], marker="x", ls="", color="0.4", label="simulator, profile\nas measured"),
                Line2D([], [], color="black", lw=1, label="y = x")]
    fig.legend(handles=handles, loc="outside right center", fontsize=7)  # upper: it would cover the title
    repeats = (result.get("settings") or {}).get("repeats")
    per = f"one point per task and repeat ({repeats} repeats of each trace)" if repeats else "one point per task and repeat"
    return finish(fig, _runs(cells), "Simulator vs real SGLang server on identical traces", per)


def _runs(cells: list[Mapping[str, Any]]):
    """The caption's setup: the cells' workloads, schedulers, rates and task counts (no seeds: one trace each)."""
    import pandas as pd

    return pd.DataFrame([{"workload": c["workload"], "scheduler": c["scheduler"], "arrival_rate": c.get("arrival_rate"),
                          "num_tasks": c.get("num_tasks"), "seed": 0} for c in cells])


def save_fidelity_jct(result: Mapping[str, Any], path: Path) -> Path | None:
    from analysis.figures import save

    return save(fidelity_jct(result), path)
