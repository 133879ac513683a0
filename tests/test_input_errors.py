"""Bad input is one line naming the key or file, raised while validating (before any simulation);
`python run.py` prints it as `error: ...` and exits with status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_trace, run_sim
from hydra import compose, initialize_config_dir

from topas.config import ConfigError, validate
from topas.workflow import Agent, CallNode, Trace, Workflow

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def cfg(*overrides):
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose(config_name="config", overrides=["logger=none", "progress=false", "workload.num_tasks=5", *overrides])


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg.strip(), msg
    return msg


def write_trace(path: Path, prefix: int, inp: int, out, agent: str = "A") -> Path:
    header = {"format": "topas-trace", "version": 1, "name": "t", "agents": {agent: prefix}}
    task = {"task_id": 0, "arrival": 0.0, "nodes": [{"id": "x", "agent": agent, "input_tokens": inp, "output_tokens": out}]}
    path.write_text(json.dumps(header) + "\n" + json.dumps(task) + "\n", encoding="utf-8")
    return path


# ---- 1. tracebacks before: load / arrival_rate / scheduler params / model fields -------------------------


@pytest.mark.parametrize("load, rate, key", [("abc", None, "workload.load"), (None, "abc", "workload.arrival_rate"),
                                              (-1, None, "workload.load"), (None, 0, "workload.arrival_rate"),
                                              (float("nan"), None, "workload.load")])
def test_rate_fields_name_the_key(load, rate, key):
    from topas.workloads.config import check_rate_fields

    with pytest.raises(ValueError) as e:
        check_rate_fields(load, rate)
    assert one_line(e.value).startswith(key)
    assert check_rate_fields(0.7, None) == (0.7, None) and check_rate_fields(None, 2) == (None, 2.0)


@pytest.mark.parametrize("override, key", [("workload.load=abc", "workload.load"),
                                           ("workload.arrival_rate=abc", "workload.arrival_rate")])
def test_validate_names_the_rate_key(override, key):
    with pytest.raises(ConfigError) as e:
        validate(cfg(override))
    assert one_line(e.value).startswith(f"{key} must be")


@pytest.mark.parametrize("name, params, msg", [
    ("topas", {"beta": "abc"}, "scheduler.params.beta must be a number, got 'abc'"),
    ("topas", {"M": -3}, "scheduler.params.M must be >= 0, got -3"),
    ("topas", {"K": 0}, "scheduler.params.K must be > 0, got 0"),
    ("topas", {"M": 2.5}, "scheduler.params.M must be an integer, got 2.5"),
    ("topas", {"use_reuse": "yes"}, "scheduler.params.use_reuse must be true or false"),
    ("topas_base", {"h_age": 0}, "scheduler.params.h_age must be > 0, got 0"),
    ("spf", {"granularity": "job"}, "scheduler.params.granularity must be one of 'task', 'request'"),
    ("continuum_ttl", {"eta": 2}, "scheduler.params.eta must be in [-1, 1], got 2"),
    ("kvflow", {"max_pin_fraction": -0.1}, "scheduler.params.max_pin_fraction must be in [0, 1]"),
    ("autellix_las", {"num_levels": 0}, "scheduler.params.num_levels must be >= 1, got 0"),
])
def test_scheduler_params_name_the_field_and_the_constraint(name, params, msg):
    from topas.policy import create_policy

    with pytest.raises(ValueError) as e:
        create_policy(name, params)
    assert msg in one_line(e.value) and f"scheduler '{name}'" in str(e.value)


def test_scheduler_params_still_accept_good_values():
    from topas.policy import create_policy

    p = create_policy("topas", {"M": 6.0, "beta": 2, "use_reuse": False}).params
    assert p.M == 6 and isinstance(p.M, int) and p.beta == 2.0 and p.use_reuse is False


def spec(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


@pytest.mark.parametrize("field, value, msg", [
    ("num_layers", 0, "model.num_layers must be >= 1, got 0"),
    ("num_kv_heads", -2, "model.num_kv_heads must be >= 1"),
    ("head_dim", "abc", "model.head_dim must be an integer, got 'abc'"),
    ("params_b", 0, "model.params_b must be > 0"),
    ("context_len", 1.5, "model.context_len must be an integer, got 1.5"),
    ("dtype_bytes", 0, "model.dtype_bytes must be >= 1"),
])
def test_model_fields_are_checked(field, value, msg):
    from topas.engines.latency.specs import load_model_spec

    with pytest.raises(ValueError) as e:
        load_model_spec({**spec("model", "qwen2_5_32b"), field: value})
    assert msg in one_line(e.value)


@pytest.mark.parametrize("field, value, msg", [
    ("memory_gib", -5, "gpu.memory_gib must be > 0"),
    ("mem_bw_gbs", 0, "gpu.mem_bw_gbs must be > 0"),
    ("peak_tflops", "fast", "gpu.peak_tflops must be a finite number"),
    ("host_link_gbs", 0, "gpu.host_link_gbs must be > 0"),
    ("host_link_latency_s", -1e-6, "gpu.host_link_latency_s must be >= 0"),
    ("cuda_graph_max_bs", 0, "gpu.cuda_graph_max_bs must be >= 1"),
])
def test_gpu_fields_are_checked(field, value, msg):
    from topas.engines.latency.specs import load_gpu_spec

    with pytest.raises(ValueError) as e:
        load_gpu_spec({**spec("gpu", "a100_80gb"), field: value})
    assert msg in one_line(e.value)


def test_model_and_gpu_integral_floats_are_ints():
    from topas.engines.latency.specs import load_model_spec

    m = load_model_spec({**spec("model", "qwen2_5_32b"), "num_layers": 64.0})
    assert m.num_layers == 64 and isinstance(m.num_layers, int)


# ---- 2. a call that can never fit the KV pool ----------------------------------------------------------


def one_call(prompt: int, out: int, prefix: int = 50) -> Trace:
    wf = Workflow("w", {"a": Agent("a", prefix)}, {"x": CallNode("x", "a", prompt - prefix, out)})
    return make_trace([wf], [0.0])


def test_prompt_near_the_pool_names_the_comparison():
    from topas.engines.sim.fit import check_trace_fits

    tr = one_call(21_800, 256, prefix=20_000)
    with pytest.raises(ConfigError) as e:
        check_trace_fits(tr, 22_035)
    msg = one_line(e.value)
    assert "task 0, call 'x' (agent 'a')" in msg
    assert "prompt 21800 + output 256 + 1 tokens = 22057 >= KV pool 22035 tokens" in msg
    check_trace_fits(tr, 22_058)  # 22057 < 22058: admitted


def test_a_huge_output_can_never_finish():
    from topas.engines.sim.fit import check_trace_fits

    tr = one_call(100, 10_000_000)
    with pytest.raises(ConfigError) as e:
        check_trace_fits(tr, 22_035)
    assert "can never finish: prompt 100 + output 10000000 - 1 tokens = 10000099 > KV pool 22035 tokens" in one_line(e.value)
    # without ignore_eos the client caps the output at max_new_tokens_cap: then it fits
    check_trace_fits(tr, 22_035, ignore_eos=False, max_new_tokens_cap=4096)
    with pytest.raises(ConfigError, match=r"output 4096 \(reserved: min\(backend.max_new_tokens_cap 4096"):
        check_trace_fits(one_call(100, 10), 4_197, ignore_eos=False, max_new_tokens_cap=4096)


def test_workload_prefix_larger_than_pool():
    from dataclasses import replace

    from topas.engines.sim.fit import check_trace_fits
    from topas.workloads import build_trace

    wc = validate(cfg())["workload"]
    tr = build_trace(replace(wc, arrival_rate=1.0, load=None), 0)
    with pytest.raises(ConfigError) as e:
        check_trace_fits(tr, 10)
    assert "task 0, call 's' (agent 'S') can never be admitted: prompt 5632 + output 256 + 1 tokens = 5889 >= KV pool 10" \
        in one_line(e.value)


@pytest.mark.parametrize("prompt, out", [(300, 200), (1000, 1), (100, 5000)])
def test_the_fit_rule_is_the_simulators_exactly(prompt, out):
    """At the boundary pool size the engine runs the call, one token less and it stalls; the check agrees."""
    from topas.engines.sim.engine import EngineStall
    from topas.engines.sim.fit import call_fit, check_trace_fits

    tr = one_call(prompt, out)
    fit = call_fit(prompt, out, 0)
    need = max(fit.admission_tokens + 1, fit.peak_tokens)  # smallest pool that admits and finishes it
    run_sim(tr, kv_pool_tokens=need)
    check_trace_fits(tr, need)
    with pytest.raises(EngineStall):
        run_sim(tr, kv_pool_tokens=need - 1)
    with pytest.raises(ConfigError):
        check_trace_fits(tr, need - 1)


def test_a_misfit_is_rejected_while_preparing_the_run_before_the_engine_starts(monkeypatch):
    import topas.engines.sim.backend as backend_mod  # imported before the patch: it binds SimEngine by name
    import topas.engines.sim.engine as engine_mod
    from topas.runner import prepare

    def no_engine(*a, **k):
        raise AssertionError("the engine was constructed")

    monkeypatch.setattr(engine_mod, "SimEngine", no_engine)
    monkeypatch.setattr(backend_mod, "SimEngine", no_engine)
    with pytest.raises(ConfigError, match=r"KV pool 10 tokens"):
        prepare(cfg("backend.kv_pool_tokens=10", "backend.latency=roofline"))


# ---- 3. unclear one-liners: seed, non-UTF-8 trace files -----------------------------------------------


@pytest.mark.parametrize("seed", ["abc", -1, 1.5])
def test_seed_is_named(seed):
    with pytest.raises(ConfigError) as e:
        validate(cfg(f"seed={seed}"))
    assert one_line(e.value).startswith("seed must be a non-negative integer")


def test_non_utf8_trace_names_the_file(tmp_path):
    from topas.workloads import load_trace

    p = tmp_path / "latin1.jsonl"
    write_trace(p, 100, 10, 5)
    p.write_bytes(p.read_bytes() + b'{"task_id": 1, "arrival": 0, "nodes": [], "x": "caf\xe9"}\n')
    with pytest.raises(ValueError) as e:
        load_trace(p)
    msg = one_line(e.value)
    assert str(p) in msg and "line 3" in msg and "not UTF-8" in msg


# ---- 4. silently accepted before -----------------------------------------------------------------------


@pytest.mark.parametrize("override, msg", [
    ("backend.decision_cost_s=-1", "backend.decision_cost_s must be >= 0, got -1"),
    ("backend.decision_cost_s=nan", "backend.decision_cost_s must be a finite number"),
    ("backend.max_running_requests=0", "backend.max_running_requests must be >= 1, got 0"),
    ("backend.max_new_tokens_cap=0", "backend.max_new_tokens_cap must be >= 1, got 0"),
    ("backend.kv_pool_tokens=0", "backend.kv_pool_tokens must be >= 1, got 0"),
    ("backend.chunked_prefill_size=-1", "backend.chunked_prefill_size must be >= 1"),
    ("backend.max_prefill_tokens=0", "backend.max_prefill_tokens must be >= 1"),
    ("backend.host_cache_ratio=-0.5", "backend.host_cache_ratio must be >= 0"),
    ("backend.mem_fraction_static=1.5", "backend.mem_fraction_static must be in (0, 1]"),
    ("backend.kv_pool_tokens=abc", "backend.kv_pool_tokens: Value 'abc'"),
])
def test_backend_nonsense_is_rejected(override, msg):
    with pytest.raises(ConfigError) as e:
        validate(cfg(override))
    assert msg in one_line(e.value)


def test_unknown_top_level_key_is_rejected():
    with pytest.raises(ConfigError) as e:
        validate(cfg("+sead=3"))
    msg = one_line(e.value)
    assert "unknown top-level config key(s) 'sead' (did you mean 'seed'?)" in msg


def test_every_key_of_the_shipped_config_is_known():
    from topas.config import KNOWN_TOP_LEVEL_KEYS

    top = yaml.safe_load((CONF / "config.yaml").read_text())
    groups = {next(iter(d)) for d in top["defaults"] if isinstance(d, dict)}
    assert (set(top) - {"defaults"}) | groups <= KNOWN_TOP_LEVEL_KEYS and "hydra" in KNOWN_TOP_LEVEL_KEYS
    validate(cfg())  # the default config (and its hydra key when composed with it) passes
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        validate(compose(config_name="config", overrides=["logger=none"], return_hydra_config=True))


# ---- 5. integral floats are token counts ---------------------------------------------------------------


def test_integral_float_token_counts_are_accepted():
    from dataclasses import replace

    from topas.workloads import build_trace

    wc = validate(cfg("workload.params.input_tokens=512.0", "workload.params.prefix_tokens.S=4096.0",
                      "workload.num_tasks=2.0", "backend.kv_pool_tokens=20000.0"))
    g = validate(cfg("backend.kv_pool_tokens=20000.0"))
    assert g["backend"].kv_pool_tokens == 20000 and isinstance(g["backend"].kv_pool_tokens, int)
    tr = build_trace(replace(wc["workload"], arrival_rate=1.0, load=None), 0)
    wf = tr.tasks[0].workflow
    assert len(tr.tasks) == 2 and wf.nodes["s"].input_tokens == 512 and isinstance(wf.nodes["s"].input_tokens, int)
    assert wf.agents["S"].prefix_tokens == 4096 and isinstance(wf.agents["S"].prefix_tokens, int)


@pytest.mark.parametrize("override, msg", [
    ("workload.params.input_tokens=512.5", "workload.params.input_tokens must be a positive integer, got 512.5"),
    ("workload.params.prefix_tokens.S=4096.5", "workload.params.prefix_tokens.S must be a positive integer"),
])
def test_fractional_token_counts_are_rejected(override, msg):
    from dataclasses import replace

    from topas.workloads import build_trace

    wc = validate(cfg(override))["workload"]
    with pytest.raises(ValueError) as e:
        build_trace(replace(wc, arrival_rate=1.0, load=None), 0)
    assert msg in one_line(e.value)


def test_trace_token_fields_accept_integral_floats(tmp_path):
    from topas.workloads import load_trace

    tr = load_trace(write_trace(tmp_path / "t.jsonl", 100.0, 10.0, 5.0))
    node = tr.tasks[0].workflow.nodes["x"]
    assert (node.input_tokens, node.output_tokens) == (10, 5) and isinstance(node.output_tokens, int)
    assert tr.tasks[0].workflow.agents["A"].prefix_tokens == 100
    with pytest.raises(ValueError, match="output_tokens must be a positive integer, got 5.5"):
        load_trace(write_trace(tmp_path / "u.jsonl", 100, 10, 5.5))


# ---- through run.py: one line, status 2, nothing simulated --------------------------------------------


@pytest.mark.parametrize("args, msg", [
    (["workload.load=abc"], "error: workload.load must be a finite number, got 'abc'"),
    (["scheduler=topas", "scheduler.params.M=-3"], "error: scheduler.params.M must be >= 0, got -3 (scheduler 'topas')"),
    (["+sead=3"], "error: unknown top-level config key(s) 'sead'"),
    (["backend.decision_cost_s=-1"], "error: backend.decision_cost_s must be >= 0"),
    (["workload=trace", "workload.params.path={trace}", "workload.num_tasks=null"],
     "error: workload 'trace': task 0, call 'x' (agent 'A') can never finish: prompt 110 + output 10000000 - 1 tokens"),
])
def test_run_py_prints_one_error_line_and_exits_2(args, msg, tmp_path):
    trace = write_trace(tmp_path / "huge.jsonl", 100, 10, 10_000_000)
    args = [a.format(trace=trace) for a in args]
    p = subprocess.run([sys.executable, str(ROOT / "run.py"), "logger=none", "workload.num_tasks=5",
                        "backend.latency=roofline", f"hydra.run.dir={tmp_path}/x", *args],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    err = p.stderr.strip()
    assert p.returncode == 2, err
    assert err.startswith(msg) and "\n" not in err, err
    assert not (tmp_path / "x" / "summary.json").exists()
