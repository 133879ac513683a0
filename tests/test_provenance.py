"""A results folder says which code made each experiment's tables (analysis/provenance.py): the report records
it, and a table made by other code, or before records were kept, is called stale in claims.md, never silent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.small_runs import shared_small_runs

from analysis import provenance
from analysis.load import load_runs

ROOT = Path(__file__).resolve().parents[1]
REC = {"runs": 40, "runs_on_other_code": 0, "code": {"fcfs": "a1", "topas": "b2"}}


def test_the_line_says_this_code_stale_code_stale_runs_or_no_record():
    assert provenance.line(REC, {"fcfs": "a1", "topas": "b2"}) == "made on this code (40 runs)"
    assert provenance.line(REC, {"fcfs": "a1", "topas": "zz"}) == "stale: the code of topas changed after its runs were made"
    assert provenance.line({**REC, "runs_on_other_code": 3}, {"fcfs": "a1", "topas": "b2"}) == (
        "stale: 3 of 40 runs were made by other code")
    assert provenance.line(None, {}).startswith("no provenance record")


def test_record_keeps_the_other_experiments_and_leaves_no_temporary_file(tmp_path):
    provenance.record(tmp_path, {"main": REC})
    provenance.record(tmp_path, {"regime": {**REC, "runs": 7}})
    data = json.loads((tmp_path / "provenance.json").read_text())
    assert set(data) == {"main", "regime"} and data["main"]["runs"] == 40 and data["regime"]["runs"] == 7
    assert [p.name for p in tmp_path.iterdir()] == ["provenance.json"]


@pytest.fixture(scope="module")
def main_runs(tmp_path_factory):
    return load_runs(shared_small_runs(tmp_path_factory) / "main")


def test_an_entry_of_fresh_runs_is_this_code_and_a_code_change_makes_it_stale(main_runs, tmp_path, monkeypatch):
    e = provenance.entry(main_runs)
    assert e["runs"] == len(main_runs) and e["runs_on_other_code"] == 0 and set(e["code"]) == set(main_runs["scheduler"])
    provenance.record(tmp_path, {"main": e})
    assert provenance.status(tmp_path, ["main", "regime"]) == {"main": provenance.line(e, e["code"])}
    assert provenance.status(tmp_path, ["main"])["main"].startswith("made on this code")
    real = provenance.code_fingerprint
    monkeypatch.setattr(provenance, "code_fingerprint",  # TOPAS's code changes; the baselines' stays
                        lambda packages: "changed" if "topas.scheduler" in packages else real(packages))
    assert provenance.status(tmp_path, ["main"])["main"].startswith("stale: the code of topas changed")


def test_a_run_made_by_other_code_is_counted(main_runs):
    runs = main_runs.copy()
    runs.loc[runs.index[0], "fingerprint"] = "0" * 16
    assert provenance.runs_on_other_code(runs) == 1


def test_an_output_without_a_record_is_reported_as_such(tmp_path):
    (tmp_path / "regime.md").write_text("# an old table\n")
    assert provenance.status(tmp_path, ["main", "regime"]) == {"regime": provenance.line(None, {})}


def test_the_report_writes_the_provenance_section_into_claims(tmp_path_factory, tmp_path):
    from analysis.report import report

    out = tmp_path / "results"
    report(out=out, runs_root=shared_small_runs(tmp_path_factory))
    recorded = json.loads((out / "provenance.json").read_text())
    assert {"main", "regime", "ablation"} <= set(recorded)
    claims = (out / "claims.md").read_text()
    assert "## Provenance" in claims and "- main: made on this code" in claims


def test_claims_md_splits_into_its_parts_and_joins_back():
    from analysis import display

    text = "# Claims\n\nhead table\n\n## Regime\n\nrows\n\n## Provenance\n\n- main: x\n"
    parts = display.split_sections(text)
    assert list(parts) == ["", "## Regime", "## Provenance"] and "".join(parts.values()) == text
    assert parts["## Regime"] == "\n## Regime\n\nrows\n"


def test_a_report_over_some_experiments_keeps_the_others_parts_of_claims_md(tmp_path_factory, tmp_path):
    """A grid is regenerated one experiment at a time: a report whose runs folder holds only the regime sweep
    rewrites claims.md's regime part and provenance, and keeps the claims table (main, ablation, ...) as the
    last regeneration wrote it, instead of dropping it."""
    import shutil

    from analysis import display
    from analysis.report import report
    from analysis.report_tables import REGIME_HEADING

    small, out = shared_small_runs(tmp_path_factory), tmp_path / "results"
    report(out=out, runs_root=small)
    whole = display.split_sections((out / "claims.md").read_text())
    assert REGIME_HEADING in whole and provenance.CLAIMS_HEADING in whole
    old_head = "# The paper's claims: an earlier regeneration\n"
    (out / "claims.md").write_text(old_head + "\n" + REGIME_HEADING + "\n\nan earlier regime map\n")
    only_regime = tmp_path / "runs"
    shutil.copytree(small / "regime", only_regime / "regime")
    report(out=out, runs_root=only_regime)
    parts = display.split_sections((out / "claims.md").read_text())
    assert parts[""] == old_head  # no main, overhead, ablation or motivation runs: kept
    assert parts[REGIME_HEADING] == whole[REGIME_HEADING]  # remade from the regime runs
    assert "- regime: made on this code" in parts[provenance.CLAIMS_HEADING]
    assert "- main: made on this code" in parts[provenance.CLAIMS_HEADING]  # its record is kept too


def test_the_committed_reduced_grid_was_made_by_this_code():
    """`make reproduce` (about 10 minutes) regenerates the reduced grid; after a change to the code its runs
    execute, this fails until it has been run, so the committed tables cannot silently describe older code.
    (The full grid takes hours and is regenerated one experiment at a time: its claims.md says what is stale.)"""
    from analysis.report import EXPERIMENTS

    assert tuple(provenance.OUTPUTS) == EXPERIMENTS  # every experiment the report writes has its output named
    lines = provenance.status(ROOT / "analysis" / "results", EXPERIMENTS)
    stale = {e: text for e, text in lines.items() if not text.startswith("made on this code")}
    assert set(lines) == set(EXPERIMENTS) and not stale, f"run `make reproduce`: {stale}"
