"""Workload generators, configs and trace files (topas/workloads)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from topas.workflow import SegmentRef, WorkflowError, validate_workflow
from topas.workloads import build_trace, dump_trace, load_trace, metagpt, resolve_arrival_rate
from topas.workloads.sampling import MinMedMax

CONF = Path(__file__).resolve().parents[1] / "conf" / "workload"
GENERATED = ("chain3", "dag4", "dag10_wide", "metagpt_sop", "metagpt_tl")


def cfg(gen: str, n: int = 20, rate: float = 0.1, **params) -> dict:
    return {"name": gen, "generator": gen, "arrival_rate": rate, "num_tasks": n, "params": params}


def edges(wf) -> set[tuple[str, str]]:
    return {(d, n.id) for n in wf.nodes.values() for d in n.deps}


@pytest.fixture(scope="module")
def sop_big():
    return build_trace(cfg("metagpt_sop", n=1500), seed=1)


@pytest.fixture(scope="module")
def tl_big():
    return build_trace(cfg("metagpt_tl", n=600), seed=1)


# ---------------------------------------------------------------------------------------------- shapes


def test_synthetic_shapes():
    c3 = build_trace(cfg("chain3", n=1), 0).tasks[0].workflow
    assert edges(c3) == {("a", "b"), ("b", "c")}
    d4 = build_trace(cfg("dag4", n=1), 0).tasks[0].workflow
    assert edges(d4) == {("s", "l"), ("s", "r"), ("l", "j"), ("r", "j")}
    d10 = build_trace(cfg("dag10_wide", n=1), 0).tasks[0].workflow
    ws = [f"w{i}" for i in range(1, 9)]
    assert edges(d10) == {("s", w) for w in ws} | {(w, "j") for w in ws}
    for wf in (c3, d4, d10):
        assert len({n.agent for n in wf.nodes.values()}) == len(wf.nodes)  # every node a distinct agent
        for n in wf.nodes.values():
            assert n.history == tuple(SegmentRef("out", d) for d in n.deps)
            assert n.stage == n.id and n.input_tokens == 512 and n.output_tokens == 256


def test_synthetic_params_override_and_reject():
    t = build_trace(cfg("chain3", n=2, input_tokens=100, prefix_tokens={"A": 10, "B": 20, "C": 30}), 0)
    assert t.agents["B"].prefix_tokens == 20 and t.tasks[0].workflow.nodes["b"].input_tokens == 100
    with pytest.raises(ValueError, match="prefix_tokens must name exactly the agents"):
        build_trace(cfg("chain3", prefix_tokens={"A": 1}), 0)


def test_synthetic_defaults_are_kv_scarce():
    """All prefixes + a full batch (16 calls) exceed the default pool; one prefix + full batch fits."""
    import yaml

    import topas.run_identity  # noqa: F401 - the resolvers of conf/workload/*.yaml (rate_unless_load), also run alone
    from topas.engines.latency.memory import kv_pool_tokens
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec

    conf = CONF.parent
    model = load_model_spec(yaml.safe_load((conf / "model" / "qwen2_5_32b.yaml").read_text()))
    gpu = load_gpu_spec(yaml.safe_load((conf / "gpu" / "a100_80gb.yaml").read_text()))
    pool = kv_pool_tokens(model, gpu)
    from topas.workloads.describe import FULL_BATCH, dynamic_kv

    for name in ("chain3", "dag4", "dag10_wide"):
        trace = build_trace(OmegaConf.load(CONF / f"{name}.yaml"), seed=0)
        prefixes = [a.prefix_tokens for a in trace.agents.values()]
        wf = trace.tasks[0].workflow
        batch = FULL_BATCH * np.mean([dynamic_kv(wf, n) for n in wf.nodes])
        assert sum(prefixes) + batch > max(pool, 30_000), name
        assert max(prefixes) + batch <= pool, name
        assert sum(prefixes) <= 0.75 * pool, name


def test_sop_shape_and_history(sop_big):
    tpl = sop_big.templates["metagpt_sop"]
    assert list(tpl.topo_order) == ["prd", "design", "tasks", "write_code", "code_review"]
    assert tpl.stages["write_code"].expected_count == pytest.approx(4.0)
    ns = []
    for t in sop_big.tasks[:200]:
        wf = t.workflow
        n = sum(1 for x in wf.nodes.values() if x.stage == "write_code")
        ns.append(n)
        order = ["prd", "design", "tasks"] + [f"{k}_{i}" for i in range(1, n + 1) for k in ("write_code", "code_review")]
        assert list(wf.nodes) == order
        assert all(wf.nodes[b].deps == (a,) for a, b in zip(order, order[1:]))
        for i in range(1, n + 1):
            codes = [SegmentRef("out", f"write_code_{j}") for j in range(1, i)]
            base = [SegmentRef("out", "design"), SegmentRef("out", "tasks")]
            assert wf.nodes[f"write_code_{i}"].history == tuple(base + codes)  # earlier files in the prompt
            assert wf.nodes[f"code_review_{i}"].history == tuple(base + codes + [SegmentRef("out", f"write_code_{i}")])
    assert set(ns) == {3, 4, 5}
    assert abs(np.mean(ns) - 4.0) < 0.25


def test_sop_lengths_match_calibration(sop_big):
    cal = metagpt.sop()
    by: dict[str, dict[str, list[int]]] = {}
    for t in sop_big.tasks:
        wf = t.workflow
        for n in wf.nodes.values():
            action = n.agent.split(".")[1]
            d = by.setdefault(action, {"user": [], "out": []})
            d["user"].append(wf.prompt_tokens(n.id) - wf.agents[n.agent].prefix_tokens)
            d["out"].append(n.output_tokens)
            assert wf.agents[n.agent].prefix_tokens == cal.system_tokens[action]
    for action, d in by.items():
        assert np.median(d["out"]) == pytest.approx(cal.output[action].median, rel=0.10), action
        assert np.median(d["user"]) == pytest.approx(cal.user[action].median, rel=0.10), action
    # outputs from the sources docs/workloads.md names
    assert cal.output["WriteCode"] == MinMedMax(57, 324, 1127)  # replays
    assert cal.output["WriteCodeReview"] == MinMedMax(16, 78, 212)  # rsp cache


def test_sop_qa_switch():
    t = build_trace(cfg("metagpt_sop", n=300, qa=True), seed=2)
    cal = metagpt.sop()
    tpl = t.templates["metagpt_sop"]
    assert list(tpl.topo_order)[-4:] == ["write_test", "run_code", "debug_error", "rerun_code"]
    wt_user, outs = [], {"WriteTest": [], "RunCode": []}
    for task in t.tasks:
        wf = task.workflow
        n = sum(1 for x in wf.nodes.values() if x.stage == "write_code")
        assert sum(1 for x in wf.nodes.values() if x.stage == "write_test") == n
        for x in wf.nodes.values():
            if x.stage == "write_test":
                assert len(x.history) == 1 and x.history[0].node.startswith("write_code_")
                wt_user.append(wf.prompt_tokens(x.id) - wf.agents[x.agent].prefix_tokens)
            if x.stage in ("write_test", "run_code"):
                outs[x.agent.split(".")[1]].append(x.output_tokens)
    assert np.median(wt_user) == pytest.approx(cal.user["WriteTest"].median, rel=0.10)
    for a, v in outs.items():
        assert np.median(v) == pytest.approx(cal.output[a].median, rel=0.10)
    assert 0.08 < sum("debug_error" in x for task in t.tasks for x in task.workflow.nodes) / sum(
        "run_code" in x for task in t.tasks for x in task.workflow.nodes
    ) < 0.25
    assert "debug_error" not in build_trace(cfg("metagpt_sop", n=1), 0).templates["metagpt_sop"].stages


def test_tl_nine_stage_star(tl_big):
    tpl = tl_big.templates["metagpt_tl"]
    order = ["tl1", "pm", "tl2", "arch", "tl3", "eng_write", "tl4", "eng_revise", "tl5"]
    assert list(tpl.topo_order) == order
    assert [tpl.stages[s].agent for s in order].count("TeamLeader") == 5
    assert {a: x.prefix_tokens for a, x in tpl.agents.items()} == {
        "TeamLeader": 3711, "ProductManager": 4950, "Architect": 1993, "Engineer2": 9205}
    assert tpl.stages["pm"].expected_count == 2 and tpl.stages["arch"].expected_count == 5
    assert tpl.stages["eng_write"].expected_count == pytest.approx(6.0)
    for t in tl_big.tasks[:100]:
        wf = t.workflow
        count = {s: sum(1 for n in wf.nodes.values() if n.stage == s) for s in order}
        n_files = count["eng_write"] - 2
        assert 3 <= n_files <= 5
        assert count == {**{s: 1 for s in order}, "pm": 2, "arch": 5, "eng_write": 2 + n_files}
        assert [wf.nodes[n].stage for n in wf.topo_order] == sorted(
            (wf.nodes[n].stage for n in wf.nodes), key=order.index)


def test_tl_turns_share_growing_history(tl_big):
    for t in tl_big.tasks[:50]:
        wf = t.workflow
        by_agent: dict[str, list[str]] = {}
        for nid in wf.topo_order:
            by_agent.setdefault(wf.nodes[nid].agent, []).append(nid)
        for agent, turns in by_agent.items():
            for prev, cur in zip(turns, turns[1:]):
                hp, hc = wf.nodes[prev].history, wf.nodes[cur].history
                extension = (SegmentRef("in", prev), SegmentRef("out", prev))
                assert hc[: len(hp) + 2] == hp + extension, (agent, cur)
                extra = hc[len(hp) + 2:]
                assert extra == () or (cur == "eng_revise_1" and extra == (SegmentRef("out", "tl4_1"),))


def test_tl_lengths_match_replay(tl_big):
    """Replayed turns reproduce the replay's prompt (qwen3 prefix + history tokens); code ~ SOP WriteCode."""
    calls = {c["idx"]: c for c in metagpt.raw()["tl"]["replay"]["calls"]}
    wf = tl_big.tasks[0].workflow
    for nid, idx in {"pm_1": 4, "pm_2": 5, "arch_3": 11, "arch_5": 13, "eng_write_1": 17, "eng_write_2": 18}.items():
        assert wf.prompt_tokens(nid) - wf.agents[wf.nodes[nid].agent].prefix_tokens == calls[idx]["history_tokens"]
    code = [n.output_tokens - 91 for t in tl_big.tasks for n in t.workflow.nodes.values()
            if n.stage == "eng_write" and n.id not in ("eng_write_1", "eng_write_2", "eng_write_3")]
    assert np.median(code) == pytest.approx(324, rel=0.10)


def test_two_piece_distribution_median():
    d = MinMedMax(57, 324, 1127)
    rng = np.random.default_rng(0)
    x = [d.sample(rng) for _ in range(20000)]
    assert min(x) >= 57 and max(x) <= 1127
    assert np.median(x) == pytest.approx(324, rel=0.03)
    assert np.mean(x) == pytest.approx(d.mean(), rel=0.03)
    assert MinMedMax(41, 41, 41).sample(rng) == 41


# ---------------------------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("gen", GENERATED)
def test_same_seed_same_trace_and_every_workflow_validates(gen):
    a, b = build_trace(cfg(gen, n=15), seed=7), build_trace(cfg(gen, n=15), seed=7)
    assert a == b
    c = build_trace(cfg(gen, n=15), seed=8)
    assert [t.arrival for t in a.tasks] != [t.arrival for t in c.tasks]
    for t in a.tasks:
        validate_workflow(t.workflow)
        assert all(n.stage in a.templates[t.template].stages for n in t.workflow.nodes.values())


def test_rate_and_num_tasks_do_not_change_task_contents():
    a = build_trace(cfg("metagpt_sop", n=10, rate=0.1), seed=3)
    b = build_trace(cfg("metagpt_sop", n=25, rate=0.05), seed=3)
    assert [t.workflow for t in a.tasks] == [t.workflow for t in b.tasks[:10]]
    assert [2 * t.arrival for t in a.tasks] == pytest.approx([t.arrival for t in b.tasks[:10]])
    gaps = np.diff([t.arrival for t in build_trace(cfg("chain3", n=4000, rate=0.5), seed=0).tasks])
    assert np.mean(gaps) == pytest.approx(2.0, rel=0.05) and a.tasks[0].arrival == 0.0


# ---------------------------------------------------------------------------------------------- configs


@pytest.mark.parametrize("bad, msg", [
    ({"generator": "nope"}, "unknown workload generator 'nope'"),
    ({"arrival_rate": -1.0}, "arrival_rate must be positive"),
    ({"num_tasks": 0}, "num_tasks must be a positive integer"),
    ({"colour": "red"}, r"unknown key\(s\) \['colour'\]"),
    ({"params": {"qa": True}}, r"unknown param\(s\) \['qa'\]"),
    ({"params": {"output_tokens": 0}}, "output_tokens must be a positive integer"),
    ({"warmup_fraction": 1.0}, "warmup_fraction must be in"),
    ({"arrival_rate": None}, "arrival_rate is null"),
])
def test_bad_config_one_line_error(bad, msg):
    c = {**cfg("chain3"), **bad}
    with pytest.raises(ValueError, match=msg) as e:
        build_trace(c, seed=0)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", GENERATED)
def test_yaml_configs_build(name):
    c = OmegaConf.load(CONF / f"{name}.yaml")
    assert set(c) == {"name", "generator", "arrival_rate", "load", "num_tasks", "warmup_fraction", "params"}
    assert c.name == name and c.warmup_fraction == 0.1 and 50 <= c.num_tasks <= 100
    c.num_tasks = 5
    t = build_trace(c, seed=0)
    assert len(t.tasks) == 5 and t.name == name


def test_load_resolution_and_warmup():
    c = {**cfg("chain3"), "arrival_rate": None, "load": 0.5}
    assert resolve_arrival_rate(c, capacity=0.2) == pytest.approx(0.1)
    # the warm-up the run tables mark: the first 10% of tasks by arrival (ties by task id)
    from topas.results import mark_warmup

    t = build_trace(cfg("chain3", n=30), 0)
    tasks = pd.DataFrame({"task_id": [x.task_id for x in t.tasks][::-1], "arrival": [x.arrival for x in t.tasks][::-1]})
    marked = mark_warmup(tasks, 0.1)
    assert set(marked.loc[marked["warmup"], "task_id"]) == {0, 1, 2}


# ---------------------------------------------------------------------------------------------- trace files


@pytest.mark.parametrize("c", [cfg("chain3", n=5), cfg("dag10_wide", n=3), cfg("metagpt_sop", n=8, qa=True),
                               cfg("metagpt_tl", n=5)], ids=lambda c: c["generator"])
def test_trace_export_reload_identical(tmp_path, c):
    trace = build_trace(c, seed=4)
    path = dump_trace(trace, tmp_path / "t.jsonl")
    assert load_trace(path) == trace
    replay = build_trace({"name": trace.name, "generator": "trace", "params": {"path": str(path)}}, seed=99)
    assert replay == trace  # file arrivals kept, seed irrelevant
    head = build_trace({"name": "x", "generator": "trace", "num_tasks": 2, "arrival_rate": 1.0,
                        "params": {"path": str(path)}}, seed=0)
    assert [t.workflow for t in head.tasks] == [t.workflow for t in trace.tasks[:2]]


def _write(tmp_path, lines) -> Path:
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


HEADER = {"format": "topas-trace", "version": 1, "agents": {"A": 10, "B": 20}}


def node(nid, agent="A", deps=(), inp=5, out=5, **kw):
    return {"id": nid, "agent": agent, "input_tokens": inp, "output_tokens": out, "deps": list(deps), **kw}


@pytest.mark.parametrize("lines, msg", [
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x", deps=["y"]), node("y", deps=["x"])]}],
     r"line 2: .*cycle (x -> y -> x|y -> x -> y)"),
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x")]}, '{"task_id": 1, "arrival": 1,'],
     r"line 3: malformed JSON"),
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x", agent="Z")]}], r"line 2: .*unknown agent 'Z'"),
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x", deps=["q"])]}], r"line 2: .*dangling dependency 'q'"),
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x", out=0)]}], r"line 2: .*output_tokens must be a positive"),
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x")]}, {"task_id": 0, "arrival": 1, "nodes": [node("x")]}],
     r"line 3: duplicate task_id 0 \(first on line 2\)"),
    ([HEADER, {"task_id": 0, "arrival": -1, "nodes": [node("x")]}], r"line 2: task 0: arrival must be a number >= 0"),
    ([{"agents": {}}], r"line 1: not a trace header"),
    ([HEADER], r"no task lines"),
    ([HEADER, {"task_id": 0, "arrival": 0, "nodes": [node("x", colour=1)]}], r"unknown key\(s\) \['colour'\]"),
])
def test_bad_trace_file_one_line_error(tmp_path, lines, msg):
    with pytest.raises(WorkflowError, match=msg) as e:
        load_trace(_write(tmp_path, lines))
    assert "\n" not in str(e.value)


def test_user_trace_without_templates(tmp_path):
    p = _write(tmp_path, [HEADER, {"task_id": 3, "arrival": 1.5, "nodes": [
        node("x"), node("y", agent="B", deps=["x"], history=[["out", "x"]], gap_s=0.5)]}])
    t = load_trace(p)
    task = t.tasks[0]
    assert task.workflow.nodes["y"].history == (SegmentRef("out", "x"),)
    assert set(t.templates[task.template].stages) == {"x", "y"}
    assert load_trace(dump_trace(t, tmp_path / "again.jsonl")) == t


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_prints_and_draws(tmp_path, capsys):
    from topas.workloads.__main__ import main

    png = tmp_path / "dag.png"
    assert main(["dag4", "--num-tasks", "3", "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "agent prefixes (tokens)" in out and "per task (mean over 3 tasks)" in out and "offered load" in out
    assert png.stat().st_size > 1000


def test_cli_describes_a_shape_with_its_offered_load(tmp_path, capsys):
    """A shape's capacity is in its own table (capacity_shapes.yaml): the description reads it from there."""
    from topas.workloads.__main__ import main

    assert main(["shapes", "params.shape=d8", "--num-tasks", "2", "--png", str(tmp_path / "d8.png")]) == 0
    out = capsys.readouterr().out
    assert "template shape_d8" in out and "offered load: " in out and "x capacity" in out
