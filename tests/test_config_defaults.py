"""One source of truth for scheduler parameters: a scheduler's code defaults (its Params dataclass)
and its config file (conf/scheduler/<name>.yaml) may differ only where the file says so. A value
that differs from the code default must be marked `# tuned (default X)` with X the code default;
a value marked `(default X)` must name the code's default. So neither can drift silently."""

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
