"""The plugin's configuration, read from the server process's environment (set by
`client/server.py`; documented in plugin/hooks.py): which policy, its parameters, extra policy
modules, templates, the decision trigger and the log files."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from topas.engines.sglang.hints import template_from_json
from topas.policy.registry import Policy, create_policy
from topas.workflow import WorkflowTemplate

ENV_POLICY = "TOPAS_POLICY"
ENV_PARAMS = "TOPAS_POLICY_PARAMS"
ENV_MODULES = "TOPAS_POLICY_MODULES"
ENV_DECISION_LOG = "TOPAS_DECISION_LOG"
ENV_TEMPLATES = "TOPAS_TEMPLATES"
ENV_TRIGGER = "TOPAS_DECISION_TRIGGER"
ENV_ITERATION_LOG = "TOPAS_ITERATION_LOG"
TRIGGERS = ("change", "pass")


class PluginConfigError(ValueError):
    pass


def import_policy_modules(spec: str | None) -> None:
    """Import modules (dotted names) or files (.py paths) that register extra policies."""
    for item in (s.strip() for s in (spec or "").split(",")):
        if not item:
            continue
        if item.endswith(".py") or os.sep in item:
            path = Path(item).resolve()
            if not path.is_file():
                raise PluginConfigError(f"{ENV_MODULES}: no such file {path}")
            name = f"_topas_policy_module_{abs(hash(str(path)))}"
            if name in sys.modules:
                continue
            spec_ = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec_)
            sys.modules[name] = mod
            spec_.loader.exec_module(mod)
        else:
            importlib.import_module(item)


def load_params(raw: str | None) -> dict[str, Any]:
    if not raw or not raw.strip():
        return {}
    text = raw.strip()
    if not text.startswith("{"):
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as e:
            raise PluginConfigError(f"{ENV_PARAMS}: not a JSON object and not a readable file: {e}") from None
    try:
        params = json.loads(text)
    except json.JSONDecodeError as e:
        raise PluginConfigError(f"{ENV_PARAMS}: invalid JSON: {e}") from None
    if not isinstance(params, dict):
        raise PluginConfigError(f"{ENV_PARAMS}: expected a JSON object, got {type(params).__name__}")
    return params


def load_templates(path: str | None) -> dict[str, WorkflowTemplate]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise PluginConfigError(f"{ENV_TEMPLATES}: cannot read {path}: {e}") from None
    return {name: template_from_json(d) for name, d in data.items()}


def policy_from_env(env: Mapping[str, str] | None = None) -> Policy:
    env = os.environ if env is None else env
    name = env.get(ENV_POLICY, "").strip()
    if not name:
        raise PluginConfigError(f"{ENV_POLICY} is not set")
    import_policy_modules(env.get(ENV_MODULES))
    return create_policy(name, load_params(env.get(ENV_PARAMS)))


def params_dict(policy: Policy) -> Any:
    """A policy's parameters as a JSON-able dict (for the decision log)."""
    p = policy.params
    return dataclasses.asdict(p) if dataclasses.is_dataclass(p) else str(p)
