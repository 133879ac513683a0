"""Which code made each experiment's committed tables and figures: provenance.json in a results folder.

A grid's experiments are regenerated one sweep at a time (the full grid takes hours), so a results folder can
hold tables of several code versions. When the report writes an experiment's tables it records, per scheduler,
the fingerprint of the code its runs execute (topas.fingerprint: the runner, the engine and that scheduler's
policy package), how many runs were made by other code (a report over runs not re-run) and how many runs. No
time is recorded: a regeneration from the same runs writes the same bytes. `status`
compares the record with the code of the day; claims.md and the console say, per experiment, whether its
tables are this code's, so a stale table is never silent (as fidelity.json does for the fidelity tables).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from topas.fingerprint import code_fingerprint, entries, run_fingerprint
from topas.results import _atomic_write  # the run outputs' writer: temp file, ordinary permissions, cleanup

PROVENANCE_JSON = "provenance.json"
# every experiment (analysis/report.py's order) and what it writes into a results folder: an experiment whose
# output is there but not in the record was made before records were kept
OUTPUTS = {"main": "main_jct.md", "load_sweep": "jct_vs_load.png", "kv_budget": "kv_budget.png",
           "ablation": "ablation.png", "overhead": "claims.md", "motivation": "motivation.png",
           "regime": "regime.md", "shapes": "shapes.md"}


def code_of(runs: pd.DataFrame) -> dict[str, str]:
    """scheduler -> fingerprint of the code its runs execute today (engine, runner, policy package)."""
    pairs = runs[["backend", "scheduler"]].drop_duplicates().itertuples(index=False)
    return {s: code_fingerprint(entries(b, s)) for b, s in sorted(pairs, key=lambda x: (x[1], x[0]))}


def runs_on_other_code(runs: pd.DataFrame) -> int:
    """Runs whose summary's fingerprint is not what their saved config gives with today's code."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    other = 0
    for run_dir, recorded in zip(runs["run_dir"], runs["fingerprint"]):
        cfg = yaml.load((Path(run_dir) / "config.yaml").read_text(), Loader=loader) or {}
        other += run_fingerprint(cfg) != recorded
    return other


def entry(runs: pd.DataFrame) -> dict[str, Any]:
    """The record of one experiment's tables, made from `runs`."""
    backends = sorted(set(runs["backend"]))
    return {"runs": len(runs), "backend": ",".join(backends),
            "runs_on_other_code": runs_on_other_code(runs), "code": code_of(runs)}


def read(out: Path) -> dict[str, Any]:
    path = Path(out) / PROVENANCE_JSON
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):  # unreadable: as good as no record
        data = {}
    return data if isinstance(data, dict) else {}


def record(out: Path, made: Mapping[str, dict[str, Any]]) -> None:
    """Record the experiments whose tables were just written (`made`: experiment -> `entry`), keeping the
    others' records; written atomically."""
    text = json.dumps({**read(out), **made}, indent=1, sort_keys=True) + "\n"
    _atomic_write(Path(out) / PROVENANCE_JSON, lambda tmp: Path(tmp).write_text(text))


def line(rec: Mapping[str, Any] | None, current: Mapping[str, str]) -> str:
    """One experiment's status: `rec` its record, `current` scheduler -> today's code fingerprint."""
    if not rec or not isinstance(rec.get("code"), Mapping):
        return "no provenance record: made by earlier code, before records were kept"
    changed = sorted(s for s, fp in rec["code"].items() if current.get(s) != fp)
    if changed:
        return f"stale: the code of {', '.join(changed)} changed after its runs were made"
    other = int(rec.get("runs_on_other_code", 0))
    if other:
        return f"stale: {other} of {rec.get('runs', '?')} runs were made by other code"
    return f"made on this code ({rec.get('runs', '?')} runs)"


def status(out: Path, experiments: Iterable[str]) -> dict[str, str]:
    """experiment -> its status line, for every experiment with a record or an output in `out`."""
    data, out = read(out), Path(out)
    lines = {}
    for e in experiments:
        rec = data.get(e)
        if rec is None and not (out / OUTPUTS.get(e, f"{e}.md")).exists():
            continue
        current = {s: code_fingerprint(entries(b, s)) for s, b in _backends(rec).items()}
        lines[e] = line(rec, current)
    return lines


def _backends(rec: Mapping[str, Any] | None) -> dict[str, str]:
    """scheduler -> backend of a record (the backend a grid's folder holds, sim unless named)."""
    if not rec:
        return {}
    backend = str(rec.get("backend", "sim")).split(",")[0]  # one backend per results folder
    return {s: backend for s in rec.get("code", {})}


CLAIMS_HEADING = "## Provenance"


def claims_section(lines: Mapping[str, str]) -> str:
    """claims.md's section: which code made each experiment's tables."""
    rows = "\n".join(f"- {e}: {text}" for e, text in lines.items())
    return (f"\n{CLAIMS_HEADING}\n\nWhich code made each experiment's tables and figures (provenance.json): the "
            f"fingerprint of the code its runs execute, compared with today's.\n\n{rows}\n")


def main(argv: list[str] | None = None) -> None:
    """`python -m analysis.provenance [results folder ...]`: each experiment's status line (default: the
    reduced and the full grid's folders); exit status 1 when any is not this code's."""
    import argparse

    root = Path(__file__).resolve().parent / "results"
    ap = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*", default=[str(root), str(root / "full")])
    stale = False
    for folder in ap.parse_args(argv).folders:
        print(f"{folder}:")
        for e, text in status(Path(folder), OUTPUTS).items():
            print(f"  {e}: {text}")
            stale |= not text.startswith("made on this code")
    raise SystemExit(1 if stale else 0)


if __name__ == "__main__":
    main()
