"""One source of truth for scheduler parameters: a scheduler's code defaults (its Params dataclass)
and its config file (conf/scheduler/<name>.yaml) may differ only where the file says so. A value
that differs from the code default must be marked `# tuned (default X)` with X the code default;
a value marked `(default X)` must name the code's default. So neither can drift silently.
Backend options likewise (below): a backend file never differs from its schema's defaults."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

import baselines  # noqa: F401  (registers the baselines)
import topas.scheduler  # noqa: F401  (registers TOPAS and its ablations)
from topas.policy.registry import builtin_policy_names, policy_class

CONF = Path(__file__).resolve().parents[1] / "conf" / "scheduler"
_PARAM = re.compile(r"^\s+(\w+):\s*[^#\n]*?(?:#(?P<comment>.*))?$")
_DEFAULT = re.compile(r"\(default ([^)]+)\)")


def _comments(path: Path) -> dict[str, str]:
    out, in_params = {}, False
    for line in path.read_text().splitlines():
        if line.startswith("params:"):
            in_params = True
            continue
        if in_params and line and not line[0].isspace():
            in_params = False
        m = _PARAM.match(line) if in_params else None
        if m:
            out[m.group(1)] = m.group("comment") or ""
    return out


@pytest.mark.parametrize("name", builtin_policy_names())
def test_config_values_differ_from_code_defaults_only_where_marked(name):
    path = CONF / f"{name}.yaml"
    params = (yaml.safe_load(path.read_text()) or {}).get("params") or {}
    schema = getattr(policy_class(name), "Params", None)
    if schema is None or not dataclasses.is_dataclass(schema):
        assert not params, f"{path.name}: parameters for a scheduler without any"
        return
    defaults = {f.name: getattr(schema(), f.name) for f in dataclasses.fields(schema)}
    comments = _comments(path)
    for key, value in params.items():
        assert key in defaults, f"{path.name}: '{key}' is not a parameter of {schema.__qualname__}"
        said = _DEFAULT.search(comments.get(key, ""))
        if said:
            assert yaml.safe_load(said.group(1)) == defaults[key], (
                f"{path.name}: '{key}' says (default {said.group(1)}) but the code default is {defaults[key]!r}")
        if value != defaults[key]:
            assert said and "tuned" in comments[key], (
                f"{path.name}: '{key}: {value}' differs from the code default {defaults[key]!r} without "
                "'# tuned (default ...)'")


# ------------------------------------------------------------------ backends
# One source for a backend's options: its schema (the engine's dataclass, registered in
# topas.config.BACKENDS). conf/backend/<name>.yaml may only repeat a schema default, never
# differ from it; the sim file composes the schema's defaults (`schema/sim`) and repeats none.

BACKEND_CONF = CONF.parent / "backend"


def _schema_defaults(name: str) -> dict:
    from topas.config import backend_part

    return dataclasses.asdict(backend_part(name, "schema")())


def test_every_registered_backend_has_a_config_file_and_every_file_a_backend():
    from topas.config import BACKENDS

    assert {p.stem for p in BACKEND_CONF.glob("*.yaml")} == set(BACKENDS)


@pytest.mark.parametrize("name", sorted({p.stem for p in BACKEND_CONF.glob("*.yaml")}))
def test_backend_file_values_are_the_schema_defaults(name):
    data = yaml.safe_load((BACKEND_CONF / f"{name}.yaml").read_text()) or {}
    data.pop("defaults", None)
    defaults = _schema_defaults(name)
    assert data.get("name") == name == defaults["name"]
    for key, value in data.items():
        assert key in defaults, f"{name}.yaml: '{key}' is not an option of the {name} backend's schema"
        assert value == defaults[key], (
            f"{name}.yaml: '{key}: {value}' differs from the schema default {defaults[key]!r}: change the default "
            "in the schema (one source), not the file")


def test_the_sim_backend_composes_exactly_the_schema_defaults():
    # every key stays in a run's config (its folder hash, topas/run_identity.py, is unchanged) with its default
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from topas.config import validate
    from topas.engines.sim.config import SimBackendConfig

    with initialize_config_dir(version_base=None, config_dir=str(CONF.parent)):
        cfg = compose(config_name="config", overrides=["backend=sim", "logger=none"])
    assert OmegaConf.to_container(cfg.backend) == dataclasses.asdict(SimBackendConfig())
    assert validate(cfg)["backend"] == SimBackendConfig()
    sim_yaml = yaml.safe_load((BACKEND_CONF / "sim.yaml").read_text())
    assert set(sim_yaml) <= {"defaults", "name"}, "sim.yaml repeats schema defaults: leave them to SimBackendConfig"


def test_the_engine_takes_every_server_arg_of_the_backend_as_set():
    from topas.engines.latency.specs import load_gpu_spec, load_model_spec
    from topas.engines.sim.backend import engine_config
    from topas.engines.sim.config import SimBackendConfig, SimServerArgs

    model = load_model_spec(yaml.safe_load((CONF.parent / "model" / "qwen2_5_32b.yaml").read_text()))
    gpu = load_gpu_spec(yaml.safe_load((CONF.parent / "gpu" / "a100_80gb.yaml").read_text()))
    changed = {"chunked_prefill_size": 4096, "max_prefill_tokens": 8192, "host_cache_ratio": 0.5, "ignore_eos": False,
               "max_new_tokens_cap": 1024, "touch_waiting_prefixes": False, "decision_cost_s": 0.001}
    assert set(changed) == {f.name for f in dataclasses.fields(SimServerArgs)}, "a new server arg: add it here"
    ecfg = engine_config(SimBackendConfig(**changed), model, gpu)
    assert {k: getattr(ecfg, k) for k in changed} == changed
    assert {f.name for f in dataclasses.fields(SimServerArgs)} <= {f.name for f in dataclasses.fields(ecfg)}
