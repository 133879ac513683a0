"""What the analysis notebooks (analysis/notebooks/) call: load the runs of a grid and show figures,
so that a notebook never shows anything but its own runs.

A notebook whose runs are missing stops at its first cell with one line naming the folder it
read (`MissingRuns`); a figure its runs cannot draw says so in one line. Nothing falls back to a
committed image.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.load import ROOT


class MissingRuns(RuntimeError):
    """No runs where a notebook looked; IPython and papermill print it as this one line."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook: no traceback for a user error
        return [f"MissingRuns: {self}"]


def runs_folder(runs_root: str | Path | None) -> Path:
    return Path(runs_root) if runs_root else ROOT / "runs"


def load(needed: list[str], runs_root: str | Path | None, suffix: str) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Every experiment's runs of the grid `suffix` under `runs_root` (analysis.report.load_all); MissingRuns when
    one of `needed` has none."""
    from analysis.report import EXPERIMENTS, load_all

    root = runs_folder(runs_root)
    runs, failed = load_all({e: e + suffix for e in EXPERIMENTS}, root)
    empty = [e + suffix for e in needed if runs[e].empty]
    if empty:
        raise MissingRuns(f"no complete runs of {', '.join(empty)} under {root} (make them with `python -m topas.reproduce "
                          f"--grid {suffix.lstrip('_') or 'default'}`, or set RUNS_ROOT / SUFFIX)")
    return runs, failed


def show(fig: Any, name: str, save_dir: str | Path | None = None) -> Any:
    """The figure, to show inline (and saved as `<save_dir>/<name>.png`); a line when the runs cannot draw it."""
    if fig is None:
        print(f"{name}: nothing to draw from these runs")
        return None
    if save_dir:
        from analysis.figures import save

        save(fig, Path(save_dir) / f"{name}.png")
    return fig
