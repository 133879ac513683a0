"""analysis.standing: each bar read from runs, met or not, with the cells that decide it."""

import numpy as np
import pandas as pd

from analysis import standing


def _shape_runs(offsets: dict[tuple[str, float], float], seeds: int = 5) -> pd.DataFrame:
    """Shape cells where TOPAS is (1 + offset) x SPF, the best baseline (LPM is 10% slower), with seed noise."""
    rng = np.random.default_rng(0)
    rows = []
    for (sid, load), off in offsets.items():
        for seed in range(seeds):
            noise = rng.normal(0, 0.2)
            for s, v in {"spf": 100.0, "lpm": 110.0, "topas": 100.0 * (1 + off)}.items():
                rows.append({"workload": f"shape_{sid}", "load": load, "scheduler": s, "seed": seed, "jct_mean": v + noise})
    return pd.DataFrame(rows)


def test_shape_bars_count_only_the_evaluation_sample_and_name_the_losses():
    cells = {(f"e{i}", load): -0.01 for i in range(10) for load in (0.5, 0.8)}  # 20 evaluation cells, all wins
    cells[("e3", 0.8)] = 0.05  # one loss of 5%: 1 of 20 cells, but larger than 3%
    cells[("d1", 0.8)] = 0.5  # a design shape: never counted
    by = {b.name: b for b in standing.shape_bars(_shape_runs(cells))}
    share = by["shape family, evaluation sample: cells lost"]
    assert share.met and share.measured.startswith("1 of 20 (5.0%)") and "e3 at 0.8" in share.where
    assert "d1" not in share.where
    largest = by["shape family, evaluation sample: largest loss"]
    assert not largest.met and largest.measured == "+5.0%"
    geo = by["shape family, evaluation sample: geomean TOPAS / best at loads >= 0.8"]
    # at 0.8: nine cells at 0.99 and one at 1.05
    assert not geo.met and geo.measured.startswith(f"{np.exp((9 * np.log(0.99) + np.log(1.05)) / 10):.3f}")
    # in hindsight, each cell's best scheduler: TOPAS in the nine it wins, SPF in e3
    assert geo.where == f"the best of every scheduler run, chosen per cell in hindsight: {np.exp(9 * np.log(0.99) / 10):.3f}"


def test_shape_bars_met_when_topas_wins_everywhere():
    bars = standing.shape_bars(_shape_runs({(f"e{i}", 0.8): -0.05 for i in range(4)}))
    assert [b.met for b in bars] == [True, True, True]


def _regime_runs(tl_vs_reference: float, dag4_offset: float) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for w, load, off, ref in (("metagpt_tl", 1.1, -0.1, tl_vs_reference), ("dag4", 0.7, dag4_offset, 0.0)):
        for seed in range(5):
            noise = rng.normal(0, 0.2)
            topas = 100.0 * (1 + off)
            for s, v in {"parrot_fcfs": 100.0, "lpm": 105.0, "topas": topas,
                         "phase_batch_nolimit": topas / (1 + ref)}.items():
                rows.append({"workload": w, "scheduler": s, "seed": seed, "jct_mean": v + noise, "jct_p99": 2 * v,
                             "load": load, "arrival_rate": 0.1, "host_cache_ratio": 2.0, "mem_fraction_static": None,
                             "kv_pool_tokens": 22035})
    return pd.DataFrame(rows)


def test_regime_bars_a_loss_anywhere_and_metagpt_tl_against_the_reference_row():
    by = {b.name: b for b in standing.regime_bars(_regime_runs(tl_vs_reference=0.10, dag4_offset=0.04))}
    lost = by["regime map (loads 0.5-1.3): cells lost"]
    assert not lost.met and lost.measured.startswith("1 of 2") and "dag4" in lost.where
    ref = by["MetaGPT-TL vs phase_batch_nolimit at loads 0.9, 1.1, 1.3"]
    assert not ref.met and "metagpt_tl" in ref.where  # TOPAS wins against every baseline, and still trails it by 10%
    by = {b.name: b for b in standing.regime_bars(_regime_runs(tl_vs_reference=0.01, dag4_offset=0.0))}
    assert all(b.met for b in by.values())


def test_overload_bars_read_only_the_given_task_count():
    rows = []
    for n, off in ((80, 0.06), (200, -0.05)):
        for seed in range(5):
            for s, v in {"parrot_fcfs": 100.0, "spf": 103.0, "topas": 100.0 * (1 + off)}.items():
                rows.append({"workload": "chain3", "load": 1.3, "num_tasks": n, "scheduler": s, "seed": seed,
                             "jct_mean": v + 0.1 * seed})
    runs = pd.DataFrame(rows)
    assert not standing.overload_bars(runs, 80)[0].met
    assert standing.overload_bars(runs, 200)[0].met
