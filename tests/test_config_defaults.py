"""One source for every default: a scheduler's parameters are its Params dataclass, composed into its config
(`scheduler/schema/<name>`, topas.policy.registry.config_node, stored by hydra_plugins/topas_conf);
conf/scheduler/<name>.yaml adds only the values the tuning sweep chose (topas.tuning.PARAM_GRIDS), each marked
with its tuning table. Backend options likewise (below): a backend file never differs from its schema's defaults."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from topas.policy.registry import builtin_policy_names, config_node, parent_policy, policy_class
from topas.tuning import PARAM_GRIDS

CONF = Path(__file__).resolve().parents[1] / "conf" / "scheduler"
TUNING_TABLE = "analysis/results/tuning/tuning.md"
_PARAM = re.compile(r"^\s+(\w+):[^#\n]*(?:#(?P<comment>.*))?$")


def _compose(name: str) -> dict:
    from omegaconf import OmegaConf

    from topas.sweep import compose_config

    return OmegaConf.to_container(compose_config([f"scheduler={name}"]).scheduler)


def _comments(path: Path) -> dict[str, str]:
    """The comment of each `params:` entry of a scheduler file."""
    lines = path.read_text().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("params:")), len(lines))
    out = {}
    for ln in lines[start + 1:]:
        if ln and not ln[0].isspace():
            break
        m = _PARAM.match(ln)
        if m:
            out[m.group(1)] = m.group("comment") or ""
    return out


@pytest.mark.parametrize("name", builtin_policy_names())
def test_a_scheduler_file_composes_its_defaults_and_holds_its_tuned_values_only(name):
    path = CONF / f"{name}.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    parent = parent_policy(name)
    schema = f"schema/{name}@_here_"
    assert data.get("defaults") == ([parent] if parent else []) + [schema, "_self_"], path.name
    assert "name" not in data, f"{path.name}: the name comes from its schema node"
    tuned = {k for grid in PARAM_GRIDS.get(name, []) for k in grid}
    params = data.get("params") or {}
    assert set(params) == tuned, f"{path.name}: holds {sorted(params)}, the tuning sweep tunes {sorted(tuned)}"
    comments = _comments(path)
    for key in params:
        assert "tuned" in comments[key] and TUNING_TABLE in comments[key], f"{path.name}: '{key}' names no tuning table"


@pytest.mark.parametrize("name", builtin_policy_names())
def test_a_composed_scheduler_config_is_its_params_defaults_with_the_tuned_values(name):
    composed = _compose(name)
    assert composed["name"] == name
    parent = parent_policy(name)
    expected = dict(_compose(parent)["params"]) if parent else {}
    expected.update(config_node(name)["params"])
    expected.update((yaml.safe_load((CONF / f"{name}.yaml").read_text()) or {}).get("params") or {})
    assert composed["params"] == expected
    schema = policy_class(name).Params
    assert set(composed["params"]) == {f.name for f in dataclasses.fields(schema)}, "every parameter, once"


def test_a_variant_changes_only_what_its_params_change():
    node = config_node("topas_base")
    assert node == {"name": "topas_base", "params": {"use_aging": False, "use_reuse": False}}
    assert _compose("topas_base")["params"]["rho"] == _compose("topas")["params"]["rho"]  # the parent's tuned value


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
