"""The workflow metadata that travels with each request: the versioned `kv_hints` actions.

Client side (driver) and scheduler side (plugin) share these types; importing this
module does not import sglang.

Workflow metadata path (verified against sglang 0.5.23 source):
  client `POST /generate {"kv_hints": {...envelope...}}`
  -> `GenerateReqInput.kv_hints` (io_struct.py; normalised by `decode_kv_hints_envelope`
     into `KvHintsEnvelope`, a msgspec struct)
  -> `TokenizedGenerateReqInput.kv_hints` (tokenizer_manager.py)
  -> `Req(kv_hints=recv_req.kv_hints)` in `Scheduler.handle_generate_request`
  -> **`req.kv_hints.actions[i].payload`** inside the scheduler process, for the action
     with `action_type == "topas.workflow"` and `action_version == "v1"`.
Fallback: `sampling_params.custom_params["topas.workflow/v1"]` (a JSON string, since
custom_params only carries JSON scalars / flat dicts through msgpack IPC)
-> **`req.sampling_params.custom_params`**.

Two action types: `topas.workflow/v1` (what the scheduler may know about a call,
`WorkflowHint`) and `topas.control/v1` (switch the plugin's policy). Templates travel
as JSON in the hint payload or in a file (`template_to_json` / `template_from_json`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topas.workflow import Agent, TemplateStage, WorkflowTemplate

KV_HINTS_PROTOCOL_VERSION = "1"
ACTION_TYPE = "topas.workflow"
ACTION_VERSION = "v1"
CUSTOM_PARAMS_KEY = f"{ACTION_TYPE}/{ACTION_VERSION}"
CONTROL_ACTION_TYPE = "topas.control"
CONTROL_ACTION_VERSION = "v1"


class HintError(ValueError):
    """A malformed topas.workflow/v1 payload (one-line message)."""


@dataclass(frozen=True)
class WorkflowHint:
    """Payload of the `topas.workflow/v1` action: what the scheduler may know about a call.

    Times are seconds on the wall clock (`time.time()`) of the machine running client
    and server (the plugin compares them with its own `time.time()`).
    Deliberately absent: the call's true output length (the engine knows
    `max_new_tokens` separately; policies never see it)."""

    task_id: int
    node: str
    stage: str
    agent: str
    template: str
    task_arrival: float
    prefix_tokens: int  # leading prompt tokens that are the agent's static prefix
    ready_time: float | None = None  # when the client released the call (deps done + gap)
    downstream_agents: tuple[str, ...] = ()  # agents of this node's direct successors
    # prompt composition, (segment id, tokens) in order (docs/workflow_model.md); equal ids = equal tokens
    segments: tuple[tuple[str, int], ...] = ()
    template_spec: Mapping[str, Any] | None = None  # optional: the template itself (template_to_json)

    def to_payload(self) -> dict[str, Any]:
        p: dict[str, Any] = {
            "task_id": self.task_id,
            "node": self.node,
            "stage": self.stage,
            "agent": self.agent,
            "template": self.template,
            "task_arrival": self.task_arrival,
            "prefix_tokens": self.prefix_tokens,
            "downstream_agents": list(self.downstream_agents),
            "segments": [[sid, n] for sid, n in self.segments],
        }
        if self.ready_time is not None:
            p["ready_time"] = self.ready_time
        if self.template_spec is not None:
            p["template_spec"] = dict(self.template_spec)
        return p

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> WorkflowHint:
        if not isinstance(p, Mapping):
            raise HintError(f"{CUSTOM_PARAMS_KEY} payload must be an object, got {type(p).__name__}")
        missing = [k for k in ("task_id", "node", "agent", "task_arrival", "prefix_tokens") if k not in p]
        if missing:
            raise HintError(f"{CUSTOM_PARAMS_KEY} payload lacks {', '.join(missing)}")
        try:
            hint = cls(
                task_id=int(p["task_id"]),
                node=str(p["node"]),
                stage=str(p.get("stage") or p["node"]),
                agent=str(p["agent"]),
                template=str(p.get("template") or ""),
                task_arrival=float(p["task_arrival"]),
                prefix_tokens=int(p["prefix_tokens"]),
                ready_time=None if p.get("ready_time") is None else float(p["ready_time"]),
                downstream_agents=tuple(str(a) for a in p.get("downstream_agents") or ()),
                segments=tuple((str(sid), int(n)) for sid, n in p.get("segments") or ()),
                template_spec=p.get("template_spec"),
            )
        except (TypeError, ValueError) as e:
            raise HintError(f"{CUSTOM_PARAMS_KEY} payload: {e}") from None
        if hint.prefix_tokens < 0:
            raise HintError(f"{CUSTOM_PARAMS_KEY} payload: negative prefix_tokens {hint.prefix_tokens}")
        return hint




def envelope(action_type: str, action_version: str, payload: Mapping[str, Any], message_id: str | None = None) -> dict[str, Any]:
    """A `kv_hints` envelope (protocol version 1) carrying one action."""
    mid = message_id or uuid.uuid4().hex
    return {
        "protocol_version": KV_HINTS_PROTOCOL_VERSION,
        "message_id": mid,
        "actions": [
            {"action_id": f"{mid}:0", "action_type": action_type, "action_version": action_version, "payload": dict(payload)}
        ],
    }


def kv_hints_envelope(hint: WorkflowHint, message_id: str | None = None) -> dict[str, Any]:
    """The JSON `kv_hints` field of a /generate request carrying `hint`."""
    return envelope(ACTION_TYPE, ACTION_VERSION, hint.to_payload(), message_id)


def control_envelope(policy: str, params: Mapping[str, Any] | None = None, message_id: str | None = None) -> dict[str, Any]:
    """`kv_hints` of a control request that switches the plugin's policy (a fresh
    instance: learned estimates and pins are dropped). Lets one server serve several
    policies in turn (tests, sweeps where a model takes minutes to load)."""
    return envelope(CONTROL_ACTION_TYPE, CONTROL_ACTION_VERSION, {"policy": policy, "params": dict(params or {})}, message_id)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _actions(req: Any, action_type: str, action_version: str) -> list[Any]:
    """The actions of `req.kv_hints` with this type and version."""
    env = getattr(req, "kv_hints", None)
    actions = (_get(env, "actions") or ()) if env is not None else ()
    return [a for a in actions if _get(a, "action_type") == action_type and _get(a, "action_version") == action_version]


def control_from_req(req: Any) -> tuple[str, dict[str, Any]] | None:
    """(policy name, params) of a `topas.control/v1` request, or None."""
    for action in _actions(req, CONTROL_ACTION_TYPE, CONTROL_ACTION_VERSION):
        p = _get(action, "payload") or {}
        name = p.get("policy") if isinstance(p, Mapping) else None
        if not isinstance(name, str) or not name:
            raise HintError(f"{CONTROL_ACTION_TYPE}/{CONTROL_ACTION_VERSION} payload needs a policy name")
        params = p.get("params") or {}
        if not isinstance(params, Mapping):
            raise HintError(f"{CONTROL_ACTION_TYPE}/{CONTROL_ACTION_VERSION} params must be an object")
        return name, dict(params)
    return None


def custom_params_fallback(hint: WorkflowHint) -> dict[str, str]:
    """`sampling_params.custom_params` entries carrying `hint` (fallback channel)."""
    return {CUSTOM_PARAMS_KEY: json.dumps(hint.to_payload(), separators=(",", ":"))}


def hint_from_req(req: Any) -> WorkflowHint | None:
    """The workflow hint of an SGLang `Req` (kv_hints first, custom_params second), or None.
    Raises HintError on a present but malformed payload."""
    for action in _actions(req, ACTION_TYPE, ACTION_VERSION):
        return WorkflowHint.from_payload(_get(action, "payload") or {})
    sp = getattr(req, "sampling_params", None)
    cp = getattr(sp, "custom_params", None) if sp is not None else None
    if isinstance(cp, Mapping) and CUSTOM_PARAMS_KEY in cp:
        raw = cp[CUSTOM_PARAMS_KEY]
        try:
            payload = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as e:
            raise HintError(f"custom_params[{CUSTOM_PARAMS_KEY!r}] is not JSON: {e}") from None
        return WorkflowHint.from_payload(payload)
    return None


# ----------------------------------------------------------------------------------------------
# Templates travel as JSON (hint payload or a file named by TOPAS_TEMPLATES)
# ----------------------------------------------------------------------------------------------


def template_to_json(t: WorkflowTemplate) -> dict[str, Any]:
    return {
        "name": t.name,
        "agents": {a.name: a.prefix_tokens for a in t.agents.values()},
        "stages": [
            {"id": s.id, "agent": s.agent, "deps": list(s.deps), "expected_count": s.expected_count}
            for s in (t.stages[k] for k in t.topo_order)
        ],
    }


def template_from_json(d: Mapping[str, Any]) -> WorkflowTemplate:
    agents = {name: Agent(name, int(n)) for name, n in d["agents"].items()}
    stages = {
        s["id"]: TemplateStage(s["id"], s["agent"], tuple(s.get("deps", ())), float(s.get("expected_count", 1.0)))
        for s in d["stages"]
    }
    return WorkflowTemplate(d["name"], agents, stages)

