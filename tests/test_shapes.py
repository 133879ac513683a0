"""The workflow-shape family: determinism, coverage of every structure, sizes, ids, trace export, runs."""

from __future__ import annotations

from collections import Counter

import pytest

from topas.workflow import validate_workflow
from topas.workloads import build_trace, dump_trace, load_trace
from topas.workloads.capacity import capacity_of
from topas.workloads.shapes import STRUCTURES, parse_id, sample_ids, shape_spec, workload_name
from topas.workloads.shapes.spec import CALL_SHARE, REFERENCE_POOL

SAMPLE_200 = sample_ids("design", 100) + sample_ids("evaluation", 100)


def cfg(shape: str, n: int = 6, rate: float = 0.5) -> dict:
    return {"name": workload_name(shape), "generator": "shapes", "arrival_rate": rate, "num_tasks": n,
            "params": {"shape": shape}}


@pytest.fixture(scope="module")
def specs():
    return {sid: shape_spec(sid) for sid in SAMPLE_200}


def test_a_shape_is_a_function_of_its_id_and_a_trace_of_its_seed():
    assert shape_spec("e5") == shape_spec("e5") and shape_spec("e5") != shape_spec("d5")
    a, b, c = build_trace(cfg("d3"), 7), build_trace(cfg("d3"), 7), build_trace(cfg("d3"), 8)
    assert a == b
    assert [t.workflow for t in a.tasks] != [t.workflow for t in c.tasks]  # lengths drawn per task and seed
    assert {tuple(t.workflow.nodes) for t in a.tasks + c.tasks} == {tuple(s.id for s in shape_spec("d3").stages)}


def test_ids_name_their_sample_and_bad_ids_are_one_line():
    assert parse_id("d17") == ("design", 17) and parse_id("e0") == ("evaluation", 0)
    assert sample_ids("evaluation", 3) == ["e0", "e1", "e2"]
    for bad in ("x1", "e", "e01", "E3", "d-1", 7):
        with pytest.raises(ValueError, match="not a shape id") as e:
            parse_id(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="workload.params.shape"):
        build_trace(cfg("q9"), 0)


def test_a_sample_of_200_covers_every_structure(specs):
    by = Counter(s.structure for s in specs.values())
    assert set(by) == set(STRUCTURES) and min(by.values()) >= 30
    f = {st: [s.features for s in specs.values() if s.structure == st] for st in STRUCTURES}
    chains = {x["calls"] for x in f["chain"]}
    assert min(chains) == 1 and max(chains) == 8  # chains of 1-8 stages
    assert {x["history"] for x in f["chain"]} == {"direct", "shared"}
    widths = [x["width"] for x in f["fanout"]]
    assert min(widths) == 2 and max(widths) >= 24 and max(widths) <= 32  # fan-outs of width 2-32
    assert {x["branch_agents"] for x in f["fanout"]} == {"one", "distinct"}
    assert any(x["join"] for x in f["fanout"]) and not all(x["join"] for x in f["fanout"])  # with and without a join
    assert any(x["widths"][i] > 1 and i + 1 < len(x["widths"]) for x in f["pipeline"] for i in range(len(x["widths"])))
    assert max(x["rounds"] for x in f["review_loop"]) >= 3  # review loops unrolled
    assert max(x["workers"] for x in f["star"]) >= 4
    assert min(x["agents"] for x in f["group_chat"]) == 2
    shares = [s.prefix_share for s in specs.values()]
    assert min(shares) < 0.08 and max(shares) > 1.0  # prefixes from ~5% to over 100% of the pool


def test_structures_are_what_they_say(specs):
    for s in specs.values():
        agents_of = {st.id: st.agent for st in s.stages}
        if s.structure == "fanout":
            branches = [st for st in s.stages if st.id.startswith("m")]
            assert len(branches) == s.features["width"]
            n_agents = len({b.agent for b in branches})
            assert n_agents == (1 if s.features["branch_agents"] == "one" else len(branches))
            if s.features["join"]:
                reduce = next(st for st in s.stages if st.id == "reduce")
                assert set(reduce.deps) == {b.id for b in branches}  # the join reads every branch
        if s.structure == "group_chat":  # every turn reads the whole transcript so far
            for i, st in enumerate(s.stages):
                assert [n for _, n in st.history] == [x.id for x in s.stages[:i]]
        if s.structure in ("review_loop", "star"):  # conversations grow: each agent's turns extend its history
            last: dict[str, tuple] = {}
            for st in s.stages:
                prev = last.get(st.agent)
                if prev is not None and s.structure == "review_loop":
                    assert st.history[: len(prev)] == prev and len(st.history) > len(prev)
                last[st.agent] = st.history
        assert set(agents_of.values()) == set(s.agents)


def test_every_call_fits_the_pool_and_every_task_validates(specs):
    for sid in SAMPLE_200[::7]:
        trace = build_trace(cfg(sid, n=8), 1)
        for t in trace.tasks:
            validate_workflow(t.workflow)
            for n in t.workflow.nodes.values():
                assert t.workflow.prompt_tokens(n.id) + n.output_tokens <= CALL_SHARE * REFERENCE_POOL + 1
    assert all(s.length_scale <= 1 for s in specs.values())
    assert any(s.length_scale < 1 for s in specs.values())  # the wide joins and long transcripts were scaled


def test_description_names_structure_and_prefix_share():
    s = shape_spec("e1")
    d = s.description()
    assert d.startswith("fan-out") and f"prefixes {100 * s.prefix_share:.0f}% of pool" in d and "\n" not in d


def test_a_shape_exports_as_a_trace_file_and_replays(tmp_path):
    trace = build_trace(cfg("e4", n=5), 3)
    path = dump_trace(trace, tmp_path / "shape.jsonl")
    assert load_trace(path) == trace
    assert build_trace({"name": trace.name, "generator": "trace", "params": {"path": str(path)}}, 0) == trace


def test_the_experiment_shapes_have_a_measured_capacity():
    from topas.reproduce import sweep_params

    for grid in ("shapes", "shapes_default", "shapes_quick"):
        shapes = sweep_params(grid)["workload.params.shape"]
        assert all(parse_id(s)[0] == "evaluation" for s in shapes)  # experiments report on the evaluation sample
        assert all(capacity_of(workload_name(s), "qwen2_5_32b", "a100_80gb") for s in shapes)
    assert len(sweep_params("shapes")["workload.params.shape"]) >= 40 and len(sweep_params("shapes")["seed"]) >= 5
    assert len(sweep_params("shapes_default")["workload.params.shape"]) >= 12


def test_run_py_runs_a_sampled_shape(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "run.py", "workload=shapes", "workload.params.shape=e3", "workload.load=0.8",
                        "scheduler=topas", "workload.num_tasks=8", "logger=none", f"hydra.run.dir={out}"],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    import json

    s = json.loads((out / "summary.json").read_text())
    assert s["workload"] == "shape_e3" and s["load"] == 0.8 and s["jct_mean"] > 0


def _runs(rows: list[tuple[str, str, float, int, float]]):
    import pandas as pd

    return pd.DataFrame([{"workload": w, "scheduler": s, "load": ld, "seed": seed, "jct_mean": j}
                         for w, s, ld, seed, j in rows])


def test_shape_cells_pair_each_scheduler_with_the_best_other_and_never_a_reference_row():
    from analysis.shapes import cells, standings

    rows = []
    for seed, noise in enumerate((0.0, 0.01, -0.01)):
        rows += [("shape_e1", "topas", 0.8, seed, 80 + noise), ("shape_e1", "spf", 0.8, seed, 100 + noise),
                 ("shape_e1", "fcfs", 0.8, seed, 120 + noise), ("shape_e1", "phase_batch_nolimit", 0.8, seed, 50 + noise),
                 ("shape_e3", "topas", 1.1, seed, 110 + noise), ("shape_e3", "spf", 1.1, seed, 100 + 3 * noise)]
    c = cells(_runs(rows), baselines=["fcfs", "spf"])
    t = c[c["scheduler"] == "topas"].set_index("shape")
    assert t.loc["e1", "best"] == "spf" and t.loc["e1", "verdict"] == "win"  # the reference row (50 s) is not the best
    assert t.loc["e3", "verdict"] == "loss" and t.loc["e3", "change"] == pytest.approx(0.1, abs=1e-3)
    assert t.loc["e1", "structure"] == "fanout" and t.loc["e1", "description"].startswith("fan-out")
    spf = c[(c["scheduler"] == "spf") & (c["shape"] == "e1")].iloc[0]
    assert spf["best"] == "topas"  # every other scheduler is compared with TOPAS too
    ref = c[c["scheduler"] == "phase_batch_nolimit"].iloc[0]
    assert ref["best"] == "topas" and ref["verdict"] == "win"  # a reference row is compared, never compared against
    s = standings(c).set_index("scheduler")
    assert s.loc["topas", "wins"] == 1 and s.loc["topas", "losses"] == 1
    assert s.loc["topas", "geomean ratio"] == pytest.approx((0.8 * 1.1) ** 0.5, rel=1e-3)
    assert s.loc["topas", "worst cell"].startswith("e3 at load 1.1: +10.0%")


def test_a_design_sample_variant_is_scored_against_the_best_baseline_and_against_topas_on_common_cells():
    from analysis.design_sample import compare, envelope

    base, variant = [], []
    for seed, noise in enumerate((0.0, 0.5, -0.5)):
        for w, ld in (("shape_d1", 0.8), ("shape_d8", 1.1)):
            base += [(w, "topas", ld, seed, 110 + noise), (w, "spf", ld, seed, 100 + noise),
                     (w, "lpm", ld, seed, 105 + noise), (w, "phase_batch_nolimit", ld, seed, 50 + noise)]
        variant.append(("shape_d8", "topas", 1.1, seed, 99 + noise))  # a variant run on one cell only
    standing, wide = compare(_runs(base), {"v": _runs(variant)})
    s = standing.set_index("scheduler")
    assert s.loc["topas", "cells"] == s.loc["v", "cells"] == 1  # only the cell both have
    assert s.loc["topas", "losses"] == 1 and s.loc["v", "wins"] == 1  # vs SPF, never the reference row
    row = wide.set_index("shape").loc["d8"]
    assert row["topas / best"] == pytest.approx(1.1, rel=1e-3) and row["v / best"] == pytest.approx(0.99, rel=1e-3)
    assert row["v vs topas"] == pytest.approx(-0.1, abs=1e-3) and row["v verdict"] == "win"
    # the per-cell best of TOPAS and the variants: the variant's 0.99 in the one common cell
    assert list(envelope(wide)) == pytest.approx([0.99], rel=1e-3)
    with pytest.raises(ValueError, match="no \\(shape, load\\) cell is common"):
        compare(_runs(base), {"v": _runs([("shape_d3", "topas", 0.5, 0, 90.0)])})  # a cell the sample lacks


def test_the_headroom_is_the_per_seed_best_of_every_scheduler_over_the_best_baselines_mean():
    from analysis.design_sample import headroom

    rows = []
    for seed, (spf, lpm, topas, ref) in enumerate(((100.0, 104.0, 102.0, 120.0), (100.0, 96.0, 101.0, 90.0))):
        rows += [("shape_d1", s, 0.8, seed, v) for s, v in
                 (("spf", spf), ("lpm", lpm), ("topas", topas), ("phase_batch_nolimit", ref))]
    h = headroom(_runs(rows)).set_index("shape")
    # the best baseline's mean is 100 (SPF 100 / 100, LPM 104 / 96); per seed the best of all is 100 (SPF), then
    # 90 (the reference): (100 + 90) / 2 over 100
    assert h.loc["d1", "best of all / best baseline"] == pytest.approx(0.95)


def test_passing_cells_set_topas_against_the_best_baseline_and_group_the_cells():
    import pandas as pd

    from analysis.design_sample import passing_cells, passing_summary

    rows = [  # (workload, scheduler, load, seed, jct, entries_passing)
        ("shape_d1", "topas", 0.8, 0, 110.0, 0.5), ("shape_d1", "spf", 0.8, 0, 100.0, 0.0),
        ("shape_d1", "lpm", 0.8, 0, 105.0, 0.2), ("shape_d2", "topas", 0.8, 0, 90.0, 0.3),
        ("shape_d2", "spf", 0.8, 0, 100.0, 0.4), ("shape_d3", "topas", 0.8, 0, 100.0, 0.1),
        ("shape_d3", "spf", 0.8, 0, 100.0, 0.1)]
    runs = pd.DataFrame([{"workload": w, "scheduler": s, "load": ld, "seed": sd, "jct_mean": j, "entries_passing": e}
                         for w, s, ld, sd, j, e in rows])
    c = passing_cells(runs).set_index("shape")
    assert c.loc["d1", "best"] == "spf" and c.loc["d1", "topas / best"] == pytest.approx(1.1)
    assert (c.loc["d1", "topas passing"], c.loc["d1", "best passing"]) == (0.5, 0.0)
    s = passing_summary(c.reset_index()).set_index("cells")
    assert list(s["count"]) == [1, 1, 1]  # d1 behind, d3 within, d2 ahead
    assert s.iloc[0]["topas passing"] == 0.5 and s.iloc[2]["best passing"] == 0.4
    assert "entry wait change" not in c  # no split columns given: none made up
    # with the JCT's two parts: d1's TOPAS starts its tasks 5 s sooner and spends 15 s longer in progress
    split = runs.assign(entry_wait_s=[20.0, 25.0, 0.0, 10.0, 10.0, 5.0, 5.0],
                        in_progress_s=[90.0, 75.0, 105.0, 80.0, 90.0, 95.0, 95.0])
    c = passing_cells(split).set_index("shape")
    assert c.loc["d1", "entry wait change"] == pytest.approx(-0.05) and c.loc["d1", "in-progress change"] == pytest.approx(0.15)
    assert passing_summary(c.reset_index()).iloc[0]["in-progress change"] == pytest.approx(0.15)
