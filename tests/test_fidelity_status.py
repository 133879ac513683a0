"""Fidelity is never silently stale: fidelity.json records the simulator and policy code it measured
(topas.fidelity.validate.code_stamp), and the report says whether that is the current code
(analysis/fidelity_status.py) in claims.md and fidelity.md. No server: the seams are pure."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

from analysis import display, fidelity_status
from analysis.fidelity_status import freshness
from topas import fingerprint as fp

ROOT = Path(__file__).resolve().parents[1]
CODE = {"fingerprint": "abc123", "measured": "2025-01-02T03:04:05+00:00"}


def test_freshness_says_current_stale_or_never_measured():
    assert freshness(CODE, "abc123") == "fidelity measured on this code (2025-01-02T03:04:05+00:00)"
    assert freshness(CODE, "def456") == ("fidelity stale since 2025-01-02T03:04:05+00:00: the simulator or policy "
                                         "code changed after it was measured")
    assert freshness(None, "abc123") == freshness({}, "abc123") == "fidelity never measured with a code fingerprint"


def test_the_record_written_to_fidelity_json_has_the_code_and_when(tmp_path):
    from topas.fidelity.validate import Setup, code_stamp, record

    (tmp_path / "profile.json").write_text(json.dumps({"meta": {"server": {"kv_pool_tokens": 4096}}}))
    code = code_stamp(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert code == {"fingerprint": fidelity_status.fidelity_fingerprint(), "measured": "2025-01-02T03:04:05+00:00"}
    rec = record(Setup(), [], tmp_path / "profile.json", (1.0, 2.0), code)
    assert rec["code"] == code and rec["settings"]["server"] == {"kv_pool_tokens": 4096}
    assert json.loads(json.dumps(rec))["code"] == code  # as fidelity.json stores it
    assert freshness(rec["code"], fidelity_status.fidelity_fingerprint()).startswith("fidelity measured on this code")
    assert datetime.fromisoformat(code_stamp()["measured"]).tzinfo is not None  # UTC, ISO 8601


def test_the_setup_names_the_real_runs_pool_when_the_profile_was_measured_on_another(tmp_path):
    """`--profile` with `--max-total-tokens`: the real server (and the simulator) ran with the given pool, and
    the report's setup line says so, not the profile's server's pool."""
    from topas.fidelity.report import settings_text
    from topas.fidelity.validate import Setup, record

    (tmp_path / "profile.json").write_text(json.dumps({"meta": {"server": {"kv_pool_tokens": 4096,
                                                                            "chunked_prefill_size": 4096}}}))
    cell = {"workload": "w", "token_scale": 0.1, "num_tasks": 2, "arrival_rate": 1.0,
            "engine": {"kv_pool_tokens": 2240, "max_running_requests": 2048, "chunked_prefill_size": 4096,
                       "max_prefill_tokens": None}}
    rec = record(Setup(), [cell], tmp_path / "profile.json", (1.0, 2.0), CODE)
    assert rec["settings"]["server"]["kv_pool_tokens"] == 2240
    text = settings_text(rec)
    assert "KV pool 2240 tokens" in text and "the profile's server had a KV pool of 4096 tokens" in text
    assert "measured in 1.0 s" in text
    rec = record(Setup(profile=str(tmp_path / "profile.json")), [], tmp_path / "profile.json", (1.0, 2.0), CODE)
    text = settings_text(rec)
    assert "KV pool 4096 tokens" in text and "profile's server had" not in text
    assert "given, not measured by this run" in text and "measured in" not in text


def test_the_fingerprint_covers_the_simulator_and_the_policies_not_analysis_or_drivers():
    modules = fp.code_modules(fidelity_status.FIDELITY_PACKAGES)
    assert {"topas.engines.sim.engine", "topas.engines.latency.factory", "topas.scheduler.score", "baselines.lpm",
            "topas.runner", "topas.workflow"} <= modules
    assert not {m for m in modules if m.startswith(("analysis", "topas.fidelity", "topas.reproduce", "topas.sweep"))}


def test_claims_md_gains_the_fidelity_status(tmp_path):
    (tmp_path / "fidelity").mkdir()
    (tmp_path / "claims.md").write_text("# The paper's claims\n")
    assert fidelity_status.status(tmp_path) is None  # no fidelity.json: nothing to say
    (tmp_path / "fidelity" / "fidelity.json").write_text(json.dumps({"cells": [], "settings": {}, "code": CODE}))
    line = fidelity_status.status(tmp_path, current="def456")
    path = tmp_path / "claims.md"
    display.assemble_sections(path, [("", ""), (fidelity_status.CLAIMS_HEADING, fidelity_status.claims_section(line))],
                              display.split_sections(path.read_text()))
    claims = (tmp_path / "claims.md").read_text()
    assert claims.startswith("# The paper's claims\n") and "## Simulator fidelity" in claims
    assert f"Simulator fidelity: {freshness(CODE, 'def456')}, see fidelity/fidelity.md" in claims
    assert fidelity_status.status(tmp_path, current="abc123").startswith("fidelity measured on this code")


def test_the_committed_fidelity_json_records_its_code_and_turns_stale_after_a_change(tmp_path):
    path = ROOT / "analysis/results/fidelity/fidelity.json"
    code = json.loads(path.read_text())["code"]
    assert len(code["fingerprint"]) == 16 and code["measured"].endswith("+00:00")
    (tmp_path / "fidelity").mkdir()
    shutil.copy(path, tmp_path / "fidelity" / "fidelity.json")
    assert fidelity_status.status(tmp_path, current=code["fingerprint"]).startswith("fidelity measured on this code")
    assert fidelity_status.status(tmp_path, current="0" * 16).startswith(f"fidelity stale since {code['measured']}")


def test_fidelity_md_states_the_code_it_measured():
    from topas.fidelity.report import code_line

    assert "fidelity measured on this code" in code_line({"code": CODE}, "abc123") and "`abc123`" in code_line(
        {"code": CODE}, "abc123")
    assert "stale since" in code_line({"code": CODE}, "def456")
    assert "never measured with a code fingerprint" in code_line({"cells": []}, "abc123")
