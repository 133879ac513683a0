"""Translation between SGLang 0.5.23 scheduler state and the engine-neutral policy API.

Pure functions and small value types; nothing here patches sglang or keeps global
state (that is `plugin.py`). Importing this module does not import sglang: the
functions that need sglang types import them lazily, so the driver (client side)
can build hint envelopes without the engine.

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
"""

from __future__ import annotations

import json
import math
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from topas.policy.decision import Decision
from topas.policy.view import CostModel, PrefixState, RequestInfo, SchedulerView, TaskProgress
from topas.workflow import Agent, TemplateStage, WorkflowTemplate

# ----------------------------------------------------------------------------------------------
# The versioned workflow hint
# ----------------------------------------------------------------------------------------------

KV_HINTS_PROTOCOL_VERSION = "1"
ACTION_TYPE = "topas.workflow"
ACTION_VERSION = "v1"
CUSTOM_PARAMS_KEY = f"{ACTION_TYPE}/{ACTION_VERSION}"


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
    # prompt composition, (segment id, tokens) in order (DESIGN.md section 9); equal ids = equal tokens
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
    def from_payload(cls, p: Mapping[str, Any]) -> "WorkflowHint":
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


def kv_hints_envelope(hint: WorkflowHint, message_id: str | None = None) -> dict[str, Any]:
    """The JSON `kv_hints` field of a /generate request carrying `hint`."""
    mid = message_id or uuid.uuid4().hex
    return {
        "protocol_version": KV_HINTS_PROTOCOL_VERSION,
        "message_id": mid,
        "actions": [
            {
                "action_id": f"{mid}:0",
                "action_type": ACTION_TYPE,
                "action_version": ACTION_VERSION,
                "payload": hint.to_payload(),
            }
        ],
    }


CONTROL_ACTION_TYPE = "topas.control"
CONTROL_ACTION_VERSION = "v1"


def control_envelope(policy: str, params: Mapping[str, Any] | None = None, message_id: str | None = None) -> dict[str, Any]:
    """`kv_hints` of a control request that switches the plugin's policy (a fresh
    instance: learned estimates and pins are dropped). Lets one server serve several
    policies in turn (tests, sweeps where a model takes minutes to load)."""
    mid = message_id or uuid.uuid4().hex
    return {
        "protocol_version": KV_HINTS_PROTOCOL_VERSION,
        "message_id": mid,
        "actions": [
            {
                "action_id": f"{mid}:0",
                "action_type": CONTROL_ACTION_TYPE,
                "action_version": CONTROL_ACTION_VERSION,
                "payload": {"policy": policy, "params": dict(params or {})},
            }
        ],
    }


def control_from_req(req: Any) -> tuple[str, dict[str, Any]] | None:
    """(policy name, params) of a `topas.control/v1` request, or None."""
    env = getattr(req, "kv_hints", None)
    for action in (_get(env, "actions") or ()) if env is not None else ():
        if _get(action, "action_type") == CONTROL_ACTION_TYPE and _get(action, "action_version") == CONTROL_ACTION_VERSION:
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


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def hint_from_req(req: Any) -> WorkflowHint | None:
    """The workflow hint of an SGLang `Req` (kv_hints first, custom_params second), or None.
    Raises HintError on a present but malformed payload."""
    env = getattr(req, "kv_hints", None)
    if env is not None:
        for action in _get(env, "actions") or ():
            if _get(action, "action_type") == ACTION_TYPE and _get(action, "action_version") == ACTION_VERSION:
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


# ----------------------------------------------------------------------------------------------
# Read-only and pinning access to SGLang's prefix caches
# ----------------------------------------------------------------------------------------------


@dataclass
class PinHandle:
    """A lock held on the radix node that ends exactly at an agent prefix."""

    tokens: int
    lock: Any  # sglang TreeLock


class CacheProbe:
    """Queries and pins on `UnifiedRadixCache` (what the 0.5.23 server builds) or the
    legacy `RadixCache`, without importing either at module level.

    - `device_match` is read-only (no LRU touch, no split): for the unified cache it is
      `tree_core.match_full_device_prefix` (Python and Rust tree cores); for the legacy
      cache a walk over `root_node.children`.
    - `host_match` uses `match_prefix` (it touches LRU and may split a node) and only
      when a host tier (HiCache) is attached; otherwise 0.
    - `pin` splits the node at the prefix boundary if needed (via `match_prefix`) and
      takes `cache.lock(node)` (= `inc_lock_ref`; `unpin` = `unlock` = `dec_lock_ref`),
      the same lock a running request holds on its matched prefix.
    """

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.unified = hasattr(cache, "tree_core")
        self.page_size = int(getattr(cache, "page_size", 1) or 1)

    def key(self, ids: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> Any:
        from sglang.srt.mem_cache.radix_cache import RadixKey

        tok = ids if isinstance(ids, array) and ids.typecode == "q" else array("q", ids)
        return RadixKey(tok, extra_key=extra_key, cache_salt=cache_salt)

    @property
    def disabled(self) -> bool:
        return bool(getattr(self.cache, "disable", False))

    @property
    def has_host_tier(self) -> bool:
        return getattr(self.cache, "cache_controller", None) is not None

    def device_match(self, key: Any) -> tuple[int, Any, int]:
        """(device-resident matched tokens, deepest matched node, tokens spanned by the
        path to that node). The last differs from the first when the match ends inside a node."""
        if self.disabled:
            return 0, None, 0
        if self.unified:
            n, node, span = self.cache.tree_core.match_full_device_prefix(key)
            return int(n), node, int(span)
        ps = self.page_size
        node = self.cache.root_node
        k = key.page_aligned(ps)
        matched = span = 0
        while len(k) > 0:
            child = node.children.get(k.child_key(ps))
            if child is None or child.value is None:
                break
            n = child.key.match(k, page_size=ps)
            if n == 0:
                break
            matched += n
            span += len(child.key)
            node = child
            if n < len(child.key):
                break
            k = k[n:]
        return matched, node, span

    def device_tokens(self, ids: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> int:
        if not ids:
            return 0
        return self.device_match(self.key(ids, extra_key, cache_salt))[0]

    def host_tokens(self, ids: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> int:
        """Tokens beyond the device match that are resident on the host tier (0 without one)."""
        if not ids or not self.has_host_tier or self.disabled:
            return 0
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        r = self.cache.match_prefix(MatchPrefixParams(key=self.key(ids, extra_key, cache_salt)))
        return int(getattr(r, "host_hit_length", 0) or 0)

    def pin(self, ids: Sequence[int]) -> PinHandle | None:
        """Lock the device-resident path of `ids` (an agent prefix). None if the prefix is
        not fully on device (nothing to pin; a policy wanting it resident must let a
        request of that agent run, or a host tier load it back)."""
        target = len(ids) // self.page_size * self.page_size
        if target == 0 or self.disabled:
            return None
        key = self.key(ids[:target])
        n, node, span = self.device_match(key)
        if n < target:
            return None
        if span > n:  # the node runs past the prefix: split it at the boundary first
            from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

            self.cache.match_prefix(MatchPrefixParams(key=key))
            n, node, span = self.device_match(key)
            if n < target:
                return None
        return PinHandle(tokens=n, lock=self.cache.lock(node))

    def unpin(self, handle: PinHandle) -> None:
        self.cache.unlock(handle.lock)

    def evictable_tokens(self) -> int:
        return int(self.cache.evictable_size()) if not self.disabled else 0


# ----------------------------------------------------------------------------------------------
# SGLang state -> SchedulerView
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineCapacity:
    kv_capacity_tokens: int
    kv_used_tokens: int
    kv_evictable_tokens: int
    host_capacity_tokens: int
    host_used_tokens: int
    max_running_requests: int


def engine_capacity(scheduler: Any, probe: CacheProbe) -> EngineCapacity:
    """Budget figures of a live `Scheduler` (token pool, tree cache, host pool, batch cap)."""
    alloc = scheduler.token_to_kv_pool_allocator
    cap = int(alloc.size)
    used = cap - int(alloc.available_size())
    host_cap = host_used = 0
    cc = getattr(probe.cache, "cache_controller", None)
    host_pool = getattr(cc, "mem_pool_host", None) if cc is not None else None
    if host_pool is not None:
        host_cap = int(getattr(host_pool, "size", 0) or 0)
        try:
            host_used = host_cap - int(host_pool.available_size())
        except Exception:  # noqa: BLE001 - a host pool without the query: report it as empty
            host_used = 0
    return EngineCapacity(
        kv_capacity_tokens=cap,
        kv_used_tokens=max(used, 0),
        kv_evictable_tokens=probe.evictable_tokens(),
        host_capacity_tokens=host_cap,
        host_used_tokens=host_used,
        max_running_requests=int(getattr(scheduler, "max_running_requests", 0) or 0),
    )


def req_token_ids(req: Any) -> array:
    """The token sequence a waiting request would match in the tree: prompt plus any
    output kept across a retraction (as `SchedulePolicy` does)."""
    ids = req.origin_input_ids
    out = req.output_ids
    if len(out):
        return array("q", ids) + array("q", out)
    return ids if isinstance(ids, array) else array("q", ids)


def request_info(
    req: Any,
    hint: WorkflowHint,
    *,
    probe: CacheProbe | None,
    ready_time: float,
    running: bool,
    admitted_time: float | None = None,
    chunked: bool = False,
) -> RequestInfo:
    """RequestInfo of one `Req`. Waiting: `cached_tokens` = device-resident match of its
    tokens now (read-only walk, capped at prompt - 1 as SGLang's own match is),
    `host_cached_tokens` = the host tier's extension.
    Running: the prompt is on device (`cached_tokens = prompt_tokens`), except for the
    request being chunk-prefilled, whose `prefix_len` tells how much is done."""
    prompt = len(req.origin_input_ids)
    if running:
        cached = min(int(getattr(req, "prefix_len", 0) or 0), prompt) if chunked else prompt
        host = 0
    elif probe is not None:
        ids = req_token_ids(req)
        extra, salt = getattr(req, "extra_key", None), getattr(req, "cache_salt", None)
        limit = max(prompt - 1, 0)  # SGLang matches at most len(prompt) - 1 (`_compute_max_prefix_len`)
        cached = min(probe.device_tokens(ids, extra, salt), limit)
        host = max(min(probe.host_tokens(ids, extra, salt), limit - cached), 0)
    else:
        cached = host = 0
    return RequestInfo(
        rid=str(req.rid),
        task_id=hint.task_id,
        node=hint.node,
        stage=hint.stage,
        agent=hint.agent,
        task_arrival=hint.task_arrival,
        ready_time=ready_time,
        prompt_tokens=prompt,
        prefix_tokens=min(hint.prefix_tokens, prompt),
        cached_tokens=cached,
        host_cached_tokens=host,
        generated_tokens=len(req.output_ids),
        preemptions=int(getattr(req, "retraction_count", 0) or 0),
        admitted_time=admitted_time if running else None,
        segments=hint.segments,
    )


def prefix_states(
    agents: Mapping[str, int],
    prefix_ids: Mapping[str, Sequence[int]],
    probe: CacheProbe,
    pinned: Iterable[str],
    running: Iterable[RequestInfo],
) -> dict[str, PrefixState]:
    """Residency of every known agent prefix. `agents`: agent -> prefix length (tokens);
    `prefix_ids`: the prefix token ids of agents seen in a request so far (an agent not
    seen yet cannot be resident)."""
    pinned = set(pinned)
    in_use = {r.agent for r in running}
    out: dict[str, PrefixState] = {}
    for agent, n in agents.items():
        ids = prefix_ids.get(agent)
        dev = min(probe.device_tokens(ids), n) if ids else 0
        host = min(probe.host_tokens(ids), n - dev) + dev if ids and probe.has_host_tier else 0
        out[agent] = PrefixState(
            agent=agent, tokens=n, device_tokens=dev, host_tokens=host, pinned=agent in pinned, in_use=agent in in_use
        )
    return out


def task_progress(
    tasks: Mapping[int, "TaskRecord"], waiting: Iterable[RequestInfo], running: Iterable[RequestInfo], now: float
) -> dict[int, TaskProgress]:
    run_by: dict[int, list[RequestInfo]] = {}
    wait_by: dict[int, list[str]] = {}
    for r in running:
        run_by.setdefault(r.task_id, []).append(r)
    for r in waiting:
        wait_by.setdefault(r.task_id, []).append(r.rid)
    out: dict[int, TaskProgress] = {}
    for tid in set(run_by) | set(wait_by) | {t for t, rec in tasks.items() if not rec.done}:
        rec = tasks.get(tid)
        if rec is None:
            continue
        running_here = run_by.get(tid, [])
        attained = rec.attained_service + sum(
            max(0.0, now - r.admitted_time) for r in running_here if r.admitted_time is not None
        )
        out[tid] = TaskProgress(
            task_id=tid,
            template=rec.template,
            arrival=rec.arrival,
            finished_nodes=tuple(rec.finished_nodes),
            stage_done=dict(rec.stage_done),
            running=tuple(r.rid for r in running_here),
            waiting=tuple(wait_by.get(tid, ())),
            attained_service=attained,
        )
    return out


@dataclass
class TaskRecord:
    """What the plugin has learned about one task from its requests (realized facts only)."""

    task_id: int
    template: str
    arrival: float
    finished_nodes: list[str] = field(default_factory=list)
    stage_done: dict[str, int] = field(default_factory=dict)
    attained_service: float = 0.0  # seconds of finished calls' service
    done: bool = False  # no request of it waiting or running (may get more later)


def build_view(
    *,
    now: float,
    waiting: Sequence[RequestInfo],
    running: Sequence[RequestInfo],
    tasks: Mapping[int, TaskRecord],
    templates: Mapping[str, WorkflowTemplate],
    prefixes: Mapping[str, PrefixState],
    capacity: EngineCapacity,
    costs: CostModel,
) -> SchedulerView:
    return SchedulerView(
        now=now,
        waiting=tuple(sorted(waiting, key=lambda r: (r.ready_time, r.rid))),
        running=tuple(running),
        tasks=task_progress(tasks, waiting, running, now),
        templates=dict(templates),
        prefixes=dict(prefixes),
        kv_capacity_tokens=capacity.kv_capacity_tokens,
        kv_used_tokens=capacity.kv_used_tokens,
        kv_evictable_tokens=capacity.kv_evictable_tokens,
        host_capacity_tokens=capacity.host_capacity_tokens,
        host_used_tokens=capacity.host_used_tokens,
        max_running_requests=capacity.max_running_requests,
        costs=costs,
    )


# ----------------------------------------------------------------------------------------------
# Decision -> SGLang
# ----------------------------------------------------------------------------------------------


def order_waiting_queue(
    waiting: Sequence[Any], decision: Decision, visible: Iterable[str]
) -> tuple[list[Any], list[Any]]:
    """Split SGLang's waiting queue (a list of `Req`) into (the queue SGLang walks now,
    the requests held back this pass).

    - Requests the policy cannot see (no workflow hint: warm-up, health checks, other
      clients) come first, in their queue order: the plugin does not starve them.
    - Then the admitted requests in `decision.admit` order (stale rids are ignored).
    - Every visible request the decision does not admit is held back.
    """
    visible = set(visible)
    by_rid = {str(r.rid): r for r in waiting}
    foreign = [r for r in waiting if str(r.rid) not in visible]
    admitted = [by_rid[rid] for rid in decision.admit if rid in by_rid and rid in visible]
    chosen = {id(r) for r in admitted}
    held = [r for r in waiting if str(r.rid) in visible and id(r) not in chosen]
    return foreign + admitted, held


def restore_order(queue_now: Sequence[Any], held: Sequence[Any], original: Sequence[Any]) -> list[Any]:
    """The waiting queue after a pass: what SGLang left waiting plus the held-back
    requests, in the order of the queue before the pass (new arrivals and requeued
    preemptions, unknown to `original`, stay at the end in SGLang's order)."""
    pos = {id(r): i for i, r in enumerate(original)}
    merged = list(queue_now) + [r for r in held if id(r) not in {id(x) for x in queue_now}]
    return sorted(merged, key=lambda r: pos.get(id(r), math.inf))


def pin_changes(current: Iterable[str], wanted: frozenset[str] | None, offload: Iterable[str], drop: Iterable[str]) -> tuple[set[str], set[str]]:
    """(agents to pin now, agents to unpin now). `wanted=None` (no opinion: the engine's
    LRU decides) releases every pin the plugin holds."""
    current = set(current)
    if wanted is None:
        return set(), current
    release = set(offload) | set(drop)
    return set(wanted) - current - release, (current - set(wanted)) | (current & release)
