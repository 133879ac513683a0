"""The measured-profile latency predictor (topas/engines/latency/measured.py): interpolation,
monotonicity, filling unmeasured cells, batched prefill, file validation with one-line
errors, and `backend=sim backend.latency=profile` through the runner."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from omegaconf import OmegaConf

from topas.engines.latency.factory import available_latency_models, build_latency_model
from topas.engines.latency.measured import FORMAT, ProfileError, ProfileLatency, monotone_grid
from topas.engines.latency.specs import load_gpu_spec, load_model_spec, repo_conf_dir


def specs():
    conf = repo_conf_dir()
    return (load_model_spec(OmegaConf.load(conf / "model" / "tiny_cpu.yaml")),
            load_gpu_spec(OmegaConf.load(conf / "gpu" / "a100_80gb.yaml")))


def profile_data(**over) -> dict:
    d = {
        "format": FORMAT,
        "prefill": {"extend_tokens": [16, 256, 1024], "prefix_tokens": [0, 512],
                    "seconds": [[0.005, 0.008], [0.010, 0.016], [0.030, 0.045]]},
        "decode": {"batch_size": [1, 4, 16], "context_tokens": [64, 1024],
                   "seconds": [[0.002, 0.003], [0.003, 0.005], [0.006, 0.012]]},
    }
    d.update(over)
    return d


def test_grid_points_are_exact_and_cells_bilinear():
    p = ProfileLatency(profile_data())
    assert p.prefill([(256, 512)]) == pytest.approx(0.016)
    assert p.decode(4, 64) == pytest.approx(0.003)
    # halfway in both axes of a cell: the mean of its four corners
    assert p.decode(10, 544) == pytest.approx((0.003 + 0.005 + 0.006 + 0.012) / 4)
    assert p.prefill([(136, 256)]) == pytest.approx((0.005 + 0.008 + 0.010 + 0.016) / 4)


def test_below_the_grid_is_flat_and_beyond_it_linear():
    p = ProfileLatency(profile_data())
    assert p.decode(1, 1) == pytest.approx(0.002)  # context below 64: the edge value
    assert p.prefill([(1, 0)]) == pytest.approx(0.005)
    slope = (0.045 - 0.016) / (1024 - 256)  # last extend segment at prefix 512
    assert p.prefill([(2048, 512)]) == pytest.approx(0.045 + 1024 * slope)
    slope_c = (0.012 - 0.006) / (1024 - 64)  # last context segment at batch 16
    assert p.decode(16, 2048) == pytest.approx(0.012 + 1024 * slope_c)
    assert p.decode(0, 100) == 0.0 and p.prefill([]) == 0.0 and p.prefill([(0, 5)]) == 0.0


def test_predictions_are_monotone_in_every_argument_even_from_a_noisy_grid():
    rng = random.Random(7)
    bs, ctx = [1, 2, 4, 8, 16, 32], [32, 128, 512, 1024, 2048]
    noisy = [[(0.002 + 2e-4 * b + 2e-7 * b * c) * rng.uniform(0.8, 1.3) for c in ctx] for b in bs]
    noisy[2][1] = None  # not measured
    p = ProfileLatency(profile_data(decode={"batch_size": bs, "context_tokens": ctx, "seconds": noisy}))
    cs = list(range(1, 4000, 37))
    for b in range(1, 60):
        row = [p.decode(b, c) for c in cs]
        assert all(y >= x - 1e-15 for x, y in zip(row, row[1:])), b
    for c in cs[::5]:
        col = [p.decode(b, c) for b in range(1, 60)]
        assert all(y >= x - 1e-15 for x, y in zip(col, col[1:])), c
    es = [1, 10, 100, 300, 900, 1500, 3000]
    for pre in (0, 100, 600, 2000):
        row = [p.prefill([(e, pre)]) for e in es]
        assert all(y >= x for x, y in zip(row, row[1:]))


def test_isotonic_smoothing_averages_a_spike_instead_of_lifting_the_rest():
    g = np.array([[2.8, 3.7, 4.45, 3.05, 3.38, 5.5]])
    out = monotone_grid(g)[0]
    assert all(b >= a for a, b in zip(out, out[1:]))
    assert out[-2] < 4.0  # a running maximum would keep 4.45 up to here
    assert out.sum() == pytest.approx(g.sum())  # least squares: the mean is kept


def test_unmeasured_cells_are_filled_from_a_bilinear_fit():
    secs = [[0.002, 0.003], [0.003, None], [0.006, 0.012]]
    p = ProfileLatency(profile_data(decode={"batch_size": [1, 4, 16], "context_tokens": [64, 1024], "seconds": secs}))
    assert 0.003 <= p.decode(4, 1024) <= 0.012


def test_a_batch_pays_the_shared_iteration_cost_once():
    p = ProfileLatency(profile_data(prefill_batch_shared_s=0.004))
    one = p.prefill([(256, 0)])
    assert p.prefill([(256, 0)] * 3) == pytest.approx(3 * one - 2 * 0.004)
    big = ProfileLatency(profile_data(prefill_batch_shared_s=1.0))  # never faster than its largest member
    assert big.prefill([(16, 0), (1024, 512)]) == pytest.approx(big.prefill([(1024, 512)]))


def test_overheads_and_client_round_trip_are_read():
    p = ProfileLatency(profile_data(overhead_s={"prefill": 0.001, "decode": 0.0005},
                                    request_latency_s={"submit": 0.003, "return": 0.001}))
    assert p.decode(4, 64) == pytest.approx(0.0035) and p.prefill([(16, 0)]) == pytest.approx(0.006)
    assert p.client_latency == {"submit": 0.003, "return": 0.001}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": "v0"}, "'format' must be"),
        ({"prefill": None}, "missing section 'prefill'"),
        ({"decode": {"batch_size": [4, 1], "context_tokens": [64], "seconds": [[1], [1]]}}, "strictly ascending"),
        ({"decode": {"batch_size": [0, 1], "context_tokens": [64], "seconds": [[1], [1]]}}, "must be positive"),
        ({"decode": {"batch_size": [1, 2], "context_tokens": [64], "seconds": [[1]]}}, "must be a list of 2 rows"),
        ({"decode": {"batch_size": [1], "context_tokens": [64, 128], "seconds": [[1]]}}, "must have 2 values"),
        ({"decode": {"batch_size": [1], "context_tokens": [64], "seconds": [[-1]]}}, "non-negative number or null"),
        ({"decode": {"batch_size": [1], "context_tokens": [64], "seconds": [[None]]}}, "no measured value"),
        ({"prefill_batch_shared_s": "x"}, "prefill_batch_shared_s must be"),
        ({"request_latency_s": {"send": 1}}, "request_latency_s must be an object"),
    ],
)
def test_a_bad_file_is_a_one_line_error_naming_the_field(tmp_path, change, message):
    path = tmp_path / "p.json"
    data = profile_data()
    data.update(change)
    data = {k: v for k, v in data.items() if v is not None}
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as e:
        ProfileLatency.from_file(path)
    assert message in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_unreadable_files_and_a_missing_path_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for p, msg in ((tmp_path / "none.json", "cannot read"), (bad, "not JSON")):
        with pytest.raises(ProfileError, match=msg):
            ProfileLatency.from_file(p)
    with pytest.raises(ValueError, match="backend.latency_profile"):
        build_latency_model("profile", *specs())


def test_registered_and_built_through_the_factory(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile_data()))
    assert "profile" in available_latency_models()
    lat = build_latency_model("profile", *specs(), path=str(path))
    assert lat.decode(4, 64) == pytest.approx(0.003) and not math.isnan(lat.prefill([(16, 0)]))
