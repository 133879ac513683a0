"""The fidelity tool's pure parts (topas/fidelity/): errors, noise, the paired comparison, the
machine-speed scaling of a profile, the report, and the profiler's batch-sharing estimate.
The validation against the real server is tests/sglang/test_fidelity.py."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from topas.engines.latency.measured import FORMAT, ProfileLatency
from topas.fidelity.calibrate import scaled_profile, speed_factors
from topas.fidelity.metrics import METRICS, compare, rel_err, spread
from topas.results import TIMELINE

PROFILE = {
    "format": FORMAT,
    "prefill": {"extend_tokens": [16, 1024], "prefix_tokens": [0, 1024], "seconds": [[0.004, 0.01], [0.03, 0.06]]},
    "decode": {"batch_size": [1, 8], "context_tokens": [16, 1024], "seconds": [[0.002, 0.003], [0.004, 0.008]]},
    "prefill_batch_shared_s": 0.002,
    "request_latency_s": {"submit": 0.003, "return": 0.001},
}


def test_relative_error_and_spread():
    assert rel_err(1.1, 1.0) == pytest.approx(0.1) and rel_err(0.0, 0.0) == 0.0
    assert math.isnan(rel_err(1.0, 0.0)) and math.isnan(rel_err(math.nan, 1.0))
    assert spread([1.0, 1.2]) == pytest.approx(0.2 / 1.1) and math.isnan(spread([1.0]))


def test_compare_pairs_each_scaled_run_with_its_real_run():
    keys = [k for k, _, _ in METRICS]
    reals = [{k: 1.0 for k in keys}, {k: 2.0 for k in keys}]
    sim = {k: 1.5 for k in keys}
    scaled = [{k: 1.1 for k in keys}, {k: 1.8 for k in keys}]
    row = compare(reals, sim, scaled)["jct_mean"]
    assert row["real"] == 1.5 and row["err"] == 0.0 and row["noise"] == pytest.approx(1 / 1.5)
    assert row["sim_scaled"] == pytest.approx(1.45) and row["err_scaled"] == pytest.approx((0.1 - 0.1) / 2)


def _fake_run(folder, rows):
    folder.mkdir(parents=True)
    tl = pd.DataFrame([{c: 0.0 for c in TIMELINE.names} for _ in rows])
    tl["kind"] = [r["kind"] for r in rows]
    tl.to_parquet(folder / "timeline.parquet")
    warmup = {"kind": "prefill", "duration": 9.0, "batch_size": 1, "extend_tokens": 5, "tokens": 5}
    (folder / "iterations.jsonl").write_text("\n".join(json.dumps(r) for r in [warmup, *rows]) + "\n")


def test_speed_factors_compare_the_run_with_the_profile_and_skip_the_warm_up(tmp_path):
    lat = ProfileLatency(PROFILE)
    rows = [
        {"kind": "prefill", "duration": 1.5 * lat.prefill([(512, 0)] * 2), "batch_size": 2, "extend_tokens": 1024,
         "tokens": 1024},
        {"kind": "decode", "duration": 10 * 1.2 * lat.decode(4, 505), "steps": 10, "batch_size": 4, "tokens": 500.5},
    ]
    _fake_run(tmp_path / "run", rows)
    f = speed_factors(tmp_path / "run", lat)
    assert f["prefill"] == pytest.approx(1.5) and f["decode"] == pytest.approx(1.2)


def test_a_scaled_profile_predicts_scaled_times_and_keeps_the_client_path():
    scaled = ProfileLatency(scaled_profile(PROFILE, {"prefill": 2.0, "decode": 0.5}))
    base = ProfileLatency(PROFILE)
    assert scaled.prefill([(100, 10)] * 3) == pytest.approx(2 * base.prefill([(100, 10)] * 3))
    assert scaled.decode(3, 300) == pytest.approx(0.5 * base.decode(3, 300))
    assert scaled.client_latency == base.client_latency and PROFILE["prefill_batch_shared_s"] == 0.002


def test_batch_sharing_estimate_of_the_profiler():
    from topas.engines.sglang.tools.profiler import batch_shared_seconds

    lat = ProfileLatency({**PROFILE, "prefill_batch_shared_s": 0.0})
    alone = lat.prefill([(100, 0)])
    batches = [{"batch": 3, "extend": 300, "prefix": 0, "seconds": 3 * alone - 2 * 0.004}]
    assert batch_shared_seconds(batches, lat.prefill) == pytest.approx(0.004)
    assert batch_shared_seconds([], lat.prefill) == 0.0
