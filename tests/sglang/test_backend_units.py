"""The SGLang backend's pure parts, without sglang: option checks, trace scaling, the
record builder (from hand-made driver / decision / iteration logs), the cost-model fit,
the configs, and the GPU check's comparison code."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from helpers.sglang_logs import chain, fake_logs, trace_of
from sglang_support import compose_cfg as cfg

from topas.config import ConfigError, validate
from topas.engines.sglang.client import backend_config
from topas.engines.sglang.client.records import per_iteration_latency, sglang_record
from topas.engines.sglang.jsonl import read_jsonl
from topas.results import REQUESTS, TASKS, TIMELINE, summarize
from topas.workloads.scaling import auto_token_scale, max_call_tokens, scale_trace, scaled_tokens

# -- configs -----------------------------------------------------------------------------------


def test_sglang_backend_and_tiny_model_configs_validate():
    g = validate(cfg("backend=sglang", "model=tiny_cpu"))
    b = g["backend"]
    assert isinstance(b, backend_config.SGLangBackendConfig) and b.name == "sglang" and b.token_scale is None
    from topas.engines.latency.specs import load_model_spec, model_spec_from_hf_config, resolve_hf_config

    c = cfg("backend=sglang", "model=tiny_cpu")
    spec = load_model_spec(c.model)
    derived = model_spec_from_hf_config(resolve_hf_config(spec), "tiny_cpu")
    for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
              "vocab_size", "context_len", "hf_config"):
        assert getattr(spec, f) == getattr(derived, f), f
    assert spec.kv_bytes_per_token == 512
    assert round(spec.params_b * 1e9) == 552064  # the shapes' count (model_spec_from_hf_config rounds to 0.0)


@pytest.mark.parametrize(
    "override, msg",
    [
        ("backend.profile=tpu", "profile must be one of"),
        ("backend.token_scale=2", "token_scale must be in (0, 1]"),
        ("backend.tp_size=2", "only tp_size=1"),
        ("backend.hint_channel=x", "hint_channel must be one of"),
        ("backend.extra_args=[--port,1]", "extra_args --port"),
        ("backend.cost_model={nope:1}", "cost_model: TOPAS_COST_MODEL: unknown key(s) nope"),
        ("backend.load_format=auto", "needs model_path"),
    ],
)
def test_bad_backend_options_are_one_line_config_errors(override, msg):
    with pytest.raises(ConfigError) as e:  # checked with the rest of the config, before a run folder exists
        validate(cfg("backend=sglang", "model=tiny_cpu", override))
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_unknown_backend_key_is_rejected_by_the_schema():
    with pytest.raises(ConfigError, match="backend"):
        validate(cfg("backend=sglang", "+backend.nope=1"))


def test_server_args_cpu_and_gpu():
    b = backend_config.SGLangBackendConfig(mem_fraction_static=0.8, enable_hierarchical_cache=True, hicache_ratio=3.0,
                                           extra_args=["--attention-backend", "fa3"])
    kw, extra = backend_config.server_args(b, "gpu")
    assert kw["max_total_tokens"] is None and kw["load_format"] == "dummy" and kw["profile"] == "gpu"
    assert extra == ["--mem-fraction-static", "0.8", "--enable-hierarchical-cache", "--hicache-ratio", "3.0",
                     "--tp-size", "1", "--attention-backend", "fa3"]
    kw, extra = backend_config.server_args(backend_config.SGLangBackendConfig(), "cpu")
    assert kw["max_total_tokens"] == backend_config.CPU_DEFAULT_POOL and extra == []
    kw, _ = backend_config.server_args(backend_config.SGLangBackendConfig(model_path="/x"), "cpu")
    assert kw["load_format"] == "auto"


def test_model_dir_defaults_to_the_hf_config_folder():
    from topas.engines.latency.specs import load_model_spec

    spec = load_model_spec(cfg("model=tiny_cpu").model)
    assert (backend_config.model_dir(backend_config.SGLangBackendConfig(), spec) / "config.json").is_file()
    with pytest.raises(ConfigError, match="does not exist"):
        backend_config.model_dir(backend_config.SGLangBackendConfig(model_path="/no/such/dir"), spec)


def test_fitted_cost_model_is_a_valid_linear_model():
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec
    from topas.engines.sglang.costs import load_cost_model

    c = cfg("model=qwen2_5_7b", "gpu=h100_80gb")
    fit = backend_config.fitted_cost_model(load_model_spec(c.model), load_gpu_spec(c.gpu), "roofline")
    cm = load_cost_model(fit)
    assert cm.bytes_per_token == 2 * 28 * 4 * 128 * 2
    assert cm.prefill_tokens_per_s > 1000 and cm.decode_step_time(1, 1024) > 0
    assert cm.decode_step_time(32, 4096) > cm.decode_step_time(32, 1024) >= cm.decode_step_time(1, 1024)


# -- scaling -----------------------------------------------------------------------------------


def test_scale_trace_keeps_structure_and_rounds_to_at_least_one_token():
    tr = trace_of(chain())
    s = scale_trace(tr, 0.01, time_scale=2.0)
    wf = s.tasks[0].workflow
    assert wf.agents["A"].prefix_tokens == 6 and wf.agents["B"].prefix_tokens == 8
    assert wf.nodes["a"].input_tokens == 1 and wf.nodes["a"].output_tokens == 1  # 1.0 and 0.5 -> 1
    assert wf.nodes["b"].history == tr.tasks[0].workflow.nodes["b"].history
    assert [t.arrival for t in s.tasks] == [0.0, 2.0]
    assert s.templates["chain"].agents["B"].prefix_tokens == 8
    assert s.tasks[0].workflow is s.tasks[1].workflow  # a shared workflow stays shared
    assert scale_trace(tr, 1.0) is tr
    assert scaled_tokens(25, 0.1) == 3 and scaled_tokens(24, 0.1) == 2 and scaled_tokens(3, 0.001) == 1
    with pytest.raises(ValueError):
        scale_trace(tr, 0.0)


def test_auto_token_scale_fits_the_context_and_a_quarter_of_the_pool():
    tr = trace_of(chain())  # largest call: 800 + 50 + 100 + 50 = 1000 tokens
    assert max_call_tokens(tr) == 1000
    assert auto_token_scale(tr, context_len=4096) == 1.0
    assert auto_token_scale(tr, context_len=4096, pool_tokens=4096) == 1.0
    assert auto_token_scale(tr, context_len=4096, pool_tokens=2048) == 0.5
    assert auto_token_scale(tr, context_len=300) == 0.2


def test_dag4_on_tiny_cpu_resolves_to_a_tenth_and_a_too_big_call_is_an_error():
    from topas.engines.latency.specs import load_model_spec
    from topas.workloads import build_trace

    c = cfg("backend=sglang", "model=tiny_cpu", "workload.num_tasks=3")
    g = validate(c)
    tr = build_trace(g["workload"], 0)
    spec = load_model_spec(c.model)
    assert backend_config.resolve_token_scale(g["backend"], tr, spec, 4096) == 0.1
    with pytest.raises(ConfigError, match="largest call has 5888 tokens"):
        backend_config.resolve_token_scale(backend_config.SGLangBackendConfig(token_scale=1.0), tr, spec, 4096)


# -- records -----------------------------------------------------------------------------------


def test_record_tables_have_exactly_the_result_columns():
    tr, calls, decisions, iterations = fake_logs()
    rec = sglang_record(tr, calls, 1000.0, 0.5, decisions, iterations, engine={"profile": "cpu"})
    assert TASKS.mismatches(rec.tasks) == REQUESTS.mismatches(rec.requests) == TIMELINE.mismatches(rec.timeline) == []
    assert rec.tasks["warmup"].tolist() == [True, False]
    r = rec.requests.set_index("rid")
    assert r.loc["tag-t0-a", "first_admit"] == pytest.approx(0.001)
    assert r.loc["tag-t0-a", "first_token"] == pytest.approx(0.012)
    assert r.loc["tag-t1-b", "prefix_hit_tokens"] == 80 and r.loc["tag-t1-b", "computed_tokens"] == 10 + 5 + 80 - 80
    assert r.loc["tag-t0-b", "service_s"] == pytest.approx(0.06 - 0.001)
    assert len(rec.timeline) == 8 and rec.timeline["start"].min() > 0
    assert rec.timeline["resident_prefixes"].tolist()[-1] == 1.0 and rec.timeline["host_tokens"].isna().all()
    e = rec.engine
    assert e["backend"] == "sglang" and e["kv_pool_tokens"] == 4096 and e["decode_steps"] == 16
    assert e["prefill_iterations"] == 4 and e["retractions"] == 0 and e["profile"] == "cpu"
    assert rec.decision_wall_s == [0.001] * 4
    s = summarize(rec, 0.4)
    assert s["mean_batch_size"] == 1.0 and s["decisions"] == 4 and s["cache_hit_rate"] > 0
    json.dumps(s)  # serialisable
    lat = per_iteration_latency(rec.timeline)
    assert lat["decode_step_s"] == pytest.approx(0.01) and lat["prefill_iteration_s"] == pytest.approx(0.01)


def test_missing_call_is_an_error():
    tr, calls, decisions, iterations = fake_logs()
    with pytest.raises(ValueError, match="no result"):
        sglang_record(tr, calls[:-1], 1000.0, 0.1, decisions, iterations)


def test_policy_preemptions_are_not_counted_as_retractions(tmp_path):
    tr, calls, decisions, iterations = fake_logs()
    calls[1]["num_retractions"] = 2
    decisions.append({"event": "preempted", "t": 1000.2, "rids": [calls[1]["rid"]]})
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps(d) for d in decisions) + "\n{torn")
    rec = sglang_record(tr, calls, 1000.0, 0.1, read_jsonl(p), iterations)
    assert rec.engine["policy_preemptions"] == 1 and rec.engine["retractions"] == 1
    assert int(rec.requests["preemptions"].sum()) == 2


def test_gpu_check_comparison_and_arguments():
    from topas.fidelity import gpu_check

    a = gpu_check.parse_args([])
    assert a.model == "qwen2_5_7b" and a.device == "gpu" and a.timeout_s > 0
    a = gpu_check.parse_args(["--device", "cpu", "--num-tasks", "2"])
    assert a.model == "tiny_cpu" and a.num_tasks == 2
    real = {"jct_mean": 2.0, "decode_step_s": 0.02, "prefill_iteration_s": 0.1}
    sim = {"jct_mean": 1.0, "decode_step_s": 0.025, "prefill_iteration_s": float("nan")}
    rows = gpu_check.compare(real, sim)
    by = {r["metric"]: r for r in rows}
    assert by["jct_mean"]["ratio"] == pytest.approx(2.0) and by["decode_step_s"]["ratio"] == pytest.approx(0.8)
    assert math.isnan(by["prefill_iteration_s"]["ratio"])
    assert gpu_check.gpu_name("NVIDIA H200, 143771 MiB") == "h200"
    assert gpu_check.gpu_name("NVIDIA H100 80GB HBM3, 81559 MiB") == "h100_80gb"
    assert gpu_check.gpu_name("NVIDIA A100-SXM4-80GB, 81920 MiB") == "a100_80gb"
    with pytest.raises(gpu_check.CheckError, match="pass --gpu"):
        gpu_check.gpu_name("NVIDIA A100-SXM4-40GB, 40960 MiB")
    text = gpu_check.format_table(rows)
    assert "jct_mean" in text and "2.00" in text
    assert isinstance(pd.DataFrame(rows), pd.DataFrame)


# -- the plugin's iteration log (fake scheduler objects; the real one runs in the e2e tests) ---


class _Mode:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def is_extend(self) -> bool:
        return self.kind == "extend"

    def is_decode(self) -> bool:
        return self.kind == "decode"


class _Req:
    def __init__(self, rid: str, out: int = 1, done: bool = False) -> None:
        self.rid, self.output_ids, self.done = rid, [7] * out, done

    def finished(self) -> bool:
        return self.done


class _Seq:
    def __init__(self, total: int) -> None:
        self.total = total

    def sum(self):
        return self

    def item(self) -> int:
        return self.total


class _Batch:
    def __init__(self, kind, reqs, launch, extend=None, prefix=None, seq=None, idle_gap=False):
        self.forward_mode, self.reqs, self.launch_ts = _Mode(kind), reqs, launch
        self.extend_lens, self.prefix_lens, self.seq_lens_cpu, self.after_idle_gap = extend, prefix, seq, idle_gap


class _Sched:
    class _Alloc:
        size = 1000

        def available_size(self) -> int:
            return 900

    class _Cache:
        disable = False
        page_size = 1

        def evictable_size(self) -> int:
            return 60

        def protected_size(self) -> int:
            return 40

    def __init__(self) -> None:
        self.token_to_kv_pool_allocator, self.tree_cache = self._Alloc(), self._Cache()
        self.waiting_queue, self.running_batch, self.max_running_requests = [1, 2], None, 8


def test_iteration_log_tiles_busy_time_and_merges_decode_stretches(tmp_path, monkeypatch):
    from topas.engines.sglang.plugin import iteration_log

    clock = {"t": 100.0}
    monkeypatch.setattr(iteration_log.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(iteration_log.time, "time", lambda: clock["t"] + 1e6)  # wall = monotonic + 1e6
    path = tmp_path / "it.jsonl"
    log, s = iteration_log.IterationLog(str(path)), _Sched()
    a, b = _Req("a"), _Req("b")

    def step(batch, end):
        clock["t"] = end
        log.observe(s, batch)

    step(_Batch("extend", [a, b], 99.0, extend=[30, 20], prefix=[10, 0]), 99.5)  # after idle: from launch
    step(_Batch("decode", [a, b], 99.6, seq=_Seq(62)), 99.7)  # 0.1 s after: not back to back, from launch
    step(_Batch("decode", [a, b], 99.705, seq=_Seq(64)), 99.8)  # scheduler gap 5 ms: tiled, merged
    step(_Batch("decode", [a, b], 99.75, seq=_Seq(66)), 99.9)  # overlap (launched before the last ended)
    b.done = True
    step(_Batch("decode", [a, b], 99.85, seq=_Seq(68)), 100.0)  # b finishes: the stretch is closed
    step(_Batch("decode", [a], 100.001, seq=_Seq(35)), 100.05)  # back to back, smaller batch: a new row
    log.close()
    recs = read_jsonl(path)
    assert [r["kind"] for r in recs] == ["prefill", "decode", "decode"]
    pre, d1, d2 = recs
    assert pre["start"] == pytest.approx(99.0 + 1e6) and pre["duration"] == pytest.approx(0.5)
    assert pre["tokens"] == 60 and pre["extend_tokens"] == 50 and pre["first"] == ["a", "b"]
    assert pre["kv_used_tokens"] == 100 and pre["tree_tokens"] == 100 and pre["waiting"] == 2
    assert d1["steps"] == 4 and d1["start"] == pytest.approx(99.6 + 1e6) and d1["duration"] == pytest.approx(0.4)
    assert d1["tokens"] == 31 and d1["finished"] == ["b"] and d1["batch_size"] == 2  # context at the start
    assert d2["steps"] == 1 and d2["start"] == pytest.approx(100.0 + 1e6) and d2["duration"] == pytest.approx(0.05)
    assert d2["batch_size"] == 1
