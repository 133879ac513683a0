"""The command line of `python -m topas.reproduce` (topas/reproduce.py): its options and the checks of
their values, made before anything runs (each failure one line)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one `error:` line (status 2), like every other bad input."""

    def error(self, message: str):  # type: ignore[override]
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def parse_args(doc: str, runs: Path, argv: list[str] | None = None) -> argparse.Namespace:
    """The options; `--` ends `--experiments` (the overrides after it reach every run)."""
    ap = OneLineParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["quick", "default", "full", "real"], default="default",
                    help="each a conf/experiment config per experiment (grid_config); real: the real-engine grid "
                         "(conf/experiment/main_real.yaml)")
    ap.add_argument("--jobs", type=positive, default=None,
                    help="local worker processes (default: one per core on the simulator; on a real engine one "
                         "per GPU group, this caps it)")
    ap.add_argument("--backend", default="sim")
    ap.add_argument("--experiments", nargs="*", default=None,
                    help="default: every experiment (simulator), the real-engine set (other backends); overrides "
                         "after it go after `--`")
    ap.add_argument("--out", default=None,
                    help="results folder (default analysis/results[/<grid>]; real engines analysis/results/<backend>/<grid>)")
    ap.add_argument("--skip-runs", action="store_true", help="only regenerate tables and figures")
    ap.add_argument("--runs", default=str(runs), help="the runs folder (default runs/)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan (runs per GPU or worker) and its estimated real time; run nothing")
    ap.add_argument("--wandb", choices=["offline", "online"], default=None,
                    help="log every run to W&B (group = <experiment>:<sweep folder>) and one report run with every figure and table; "
                         "offline runs: upload with `wandb sync`")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every run (gpu=..., hydra/launcher=slurm, ...)")
    return ap.parse_args(argv)


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return n


def _folder(what: str, path: Path, must_exist: bool = False) -> str | None:
    """Why `path` cannot be the `what` folder (a file, missing, not writable), or None."""
    from topas.runner import check_output_dir

    if must_exist and not path.is_dir():
        return f"{what} {path}: {'not a folder' if path.exists() else 'no such folder'}"
    try:
        check_output_dir(path)
    except ValueError as e:
        return f"{what}: {e}"
    return None


def check_args(a: argparse.Namespace, runs: Path, out: Path, names: dict[str, str]) -> str | None:
    """What is wrong with the command line (one line), before anything runs; None if nothing. `names`: every
    experiment -> its runs folder's name on this grid and backend."""
    if a.experiments is not None:
        if not a.experiments:
            return "--experiments names no experiment; name some (" + ", ".join(names) + ") or leave it out"
        given = [e for e in a.experiments if "=" in e]
        if given:
            return (f"--experiments {given[0]}: an override, not an experiment; write overrides before --experiments "
                    f"or after `--` (--experiments {' '.join(e for e in a.experiments if '=' not in e)} -- {' '.join(given)})")
        unknown = [e for e in a.experiments if e not in names]
        if unknown:
            return f"--experiments: unknown experiment(s) {', '.join(unknown)}; known: {', '.join(names)}"
    if a.skip_runs:
        wanted = [names[e] for e in a.experiments or names]
        if not any((runs / w).is_dir() for w in wanted):
            why = _folder("--runs", runs, must_exist=True) or f"--runs {runs}: holds no run of the '{a.grid}' grid"
            return f"{why} (looked for {', '.join(wanted)}); nothing to report"
    return _folder("--runs", runs) or _folder("--out", out)

