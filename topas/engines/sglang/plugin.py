"""SGLang 0.5.23 plugin: run an engine-neutral topas policy inside the real scheduler.

Entry point `sglang.srt.plugins: topas = topas.engines.sglang.plugin:register`
(pyproject). SGLang calls `load_plugins()` in every server process (engine, scheduler,
detokenizer); `register()` does nothing unless `TOPAS_POLICY` is set, then validates
the policy configuration (a bad name or parameter stops the server at launch with a
one-line message) and registers three hooks (a fourth with `TOPAS_ITERATION_LOG`) with
`sglang.srt.plugins.hook_registry.HookRegistry`; they only act in the scheduler process.

Hooks (targets in sglang 0.5.23):

1. AROUND `sglang.srt.managers.scheduler.Scheduler._get_new_batch_prefill_raw`
   (one prefill-admission pass; runs every scheduler iteration). Before the original:
   observe the waiting queue / running batch / chunked request, emit policy events
   (task arrived, request ready, request finished), compute a new decision only if the
   set of waiting or running workflow requests changed since the last one (otherwise
   the last decision is reused), then apply preemptions (release + requeue, as
   `PrefillAdder.preempt_to_schedule` does) and pins (lock refs on the radix node that
   ends at each agent prefix). This runs before SGLang's early returns, so a policy can
   preempt even when the batch is full. After the original (in `finally`): requests the
   decision held back go back into `scheduler.waiting_queue`, in their previous order.
2. AROUND `sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority`: lets
   SGLang's own policy run (its prefix matching feeds SGLang's load metrics), then
   rewrites the waiting queue in place: requests without a workflow hint first (FCFS),
   then `Decision.admit` in order; every other workflow request is removed for this pass
   (held back) and restored by hook 1.
3. AROUND `sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req`: records the
   exact admission order, and emulates the contract's skip-on-misfit. SGLang walks the
   queue and stops at the first request that returns NO_TOKEN / OTHER. When the
   decision says `stop_at_first_misfit=False`, a workflow request that was not added
   with NO_TOKEN (its own extend + reserved output does not fit) is turned into
   CONTINUE if the adder still has budget (`budget_state() == CONTINUE`), so the walk
   goes on to the next admitted request. OTHER (pass-level limits: chunk budget, input
   cap, prefill_max_requests, prefill delayer) still stops the walk, as does a full
   batch (`max_running_requests`), which SGLang checks before calling `add_one_req`.
   Approximation: on the `ignore_eos` path without a radix cache (not the default), a
   misfit leaves its reservation in the adder's `req_states`, making later admissions
   in the same pass slightly more conservative.
4. (only with TOPAS_ITERATION_LOG) AROUND
   `sglang.srt.managers.scheduler.Scheduler.process_batch_result`: after the original,
   one record per prefill iteration or decode stretch (`IterationLog`); observing never
   raises into the scheduler.

Decision.offload / Decision.drop: SGLang 0.5.23 has no public per-node demote or drop
call (`UnifiedRadixCache` evicts through its LRU walk; `_evict_device_leaf` and
`tree_core.demote` are internals); the plugin applies them as "release the pin" and logs
them, leaving the eviction to SGLang's LRU (see the decision log's `not_applied`).

Environment (set by `server.py`):
  TOPAS_POLICY          policy name in `topas.policy.registry` (unset: plugin inactive)
  TOPAS_POLICY_PARAMS   JSON object of policy parameters, or a path to a JSON file
  TOPAS_POLICY_MODULES  comma-separated modules or .py paths to import first (they may
                        register extra policies, e.g. test policies)
  TOPAS_DECISION_LOG    JSONL file the scheduler appends decisions and admissions to
  TOPAS_TEMPLATES       optional JSON file {name: template_to_json(...)}; templates may
                        also arrive in the hint payload (`template_spec`)
  TOPAS_COST_MODEL      optional JSON (see costs.py)
  TOPAS_DECISION_TRIGGER  "change" (default: a new decision when the set of waiting or
                        running workflow requests changed, i.e. on arrival, admission,
                        finish, preemption) or "pass" (a new decision at every admission pass)
  TOPAS_ITERATION_LOG   optional JSONL file: one record per engine iteration (prefill) or
                        decode stretch, from hook 4 (`IterationLog`); the run records'
                        timeline and first-token times come from it

Scope: one scheduler process (tp_size = dp_size = pp_size = 1). With TP > 1 every rank
runs its own policy on wall-clock times and the ranks could disagree; not supported.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Mapping

from topas.engines.sglang.adapter import (
    CacheProbe,
    EngineCapacity,
    HintError,
    PinHandle,
    TaskRecord,
    WorkflowHint,
    build_view,
    control_from_req,
    engine_capacity,
    hint_from_req,
    order_waiting_queue,
    pin_changes,
    prefix_states,
    request_info,
    restore_order,
    template_from_json,
)
from topas.policy.decision import Decision
from topas.policy.events import RequestFinished, RequestReady, TaskArrived
from topas.policy.registry import Policy, create_policy
from topas.policy.view import RequestInfo
from topas.workflow import WorkflowTemplate

logger = logging.getLogger("topas.sglang")

ENV_POLICY = "TOPAS_POLICY"
ENV_PARAMS = "TOPAS_POLICY_PARAMS"
ENV_MODULES = "TOPAS_POLICY_MODULES"
ENV_DECISION_LOG = "TOPAS_DECISION_LOG"
ENV_TEMPLATES = "TOPAS_TEMPLATES"
ENV_TRIGGER = "TOPAS_DECISION_TRIGGER"
ENV_ITERATION_LOG = "TOPAS_ITERATION_LOG"
TRIGGERS = ("change", "pass")

TARGET_PASS = "sglang.srt.managers.scheduler.Scheduler._get_new_batch_prefill_raw"
TARGET_PRIORITY = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
TARGET_ADD = "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req"
TARGET_RESULT = "sglang.srt.managers.scheduler.Scheduler.process_batch_result"


class PluginConfigError(ValueError):
    pass


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# The controller: one per scheduler process
# ----------------------------------------------------------------------------------------------


class DecisionLog:
    def __init__(self, path: str | None) -> None:
        self._f = open(path, "a", encoding="utf-8", buffering=1) if path else None
        self._lock = threading.Lock()

    def write(self, **record: Any) -> None:
        if self._f is None:
            return
        line = json.dumps(record, separators=(",", ":"), default=_json_default)
        with self._lock:
            self._f.write(line + "\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


class Controller:
    """Observes the scheduler, asks the policy, applies its decisions."""

    def __init__(
        self,
        scheduler: Any,
        policy: Policy,
        log: DecisionLog,
        templates: Mapping[str, WorkflowTemplate] | None = None,
        costs: Any = None,
        clock=time.time,
    ) -> None:
        from topas.engines.sglang.costs import load_cost_model

        self.scheduler = scheduler
        self.policy = policy
        self.log = log
        self.clock = clock
        self.probe = CacheProbe(scheduler.tree_cache)
        self.costs = costs or load_cost_model(model_config=getattr(scheduler, "model_config", None))
        self.templates: dict[str, WorkflowTemplate] = dict(templates or {})
        self.agents: dict[str, int] = {}  # agent -> prefix tokens
        for t in self.templates.values():
            self._learn_template_agents(t)
        self.prefix_ids: dict[str, Any] = {}  # agent -> array of prefix token ids (first request seen)
        self.hints: dict[str, WorkflowHint | None] = {}  # rid -> hint (None: foreign request)
        self.ready_at: dict[str, float] = {}
        self.admitted_at: dict[str, float] = {}
        self.admitted_info: dict[str, RequestInfo] = {}
        self.live: dict[str, Any] = {}  # rid -> Req, workflow requests waiting or running
        self.tasks: dict[int, TaskRecord] = {}
        self.pins: dict[str, PinHandle] = {}
        self.last_signature: tuple | None = None
        self.decision: Decision | None = None
        self.last_infos: dict[str, RequestInfo] = {}
        self.reused = 0
        self.decisions = 0
        self.controls_done: set[str] = set()
        self.trigger = os.environ.get(ENV_TRIGGER, "change") or "change"
        # per-pass state
        self.in_pass = False
        self.original_queue: list[Any] = []
        self.held: list[Any] = []
        self.admitted_this_pass: list[str] = []

    # -- observation ---------------------------------------------------------------------

    def _learn_template_agents(self, t: WorkflowTemplate) -> None:
        for a in t.agents.values():
            self.agents.setdefault(a.name, a.prefix_tokens)

    def hint(self, req: Any) -> WorkflowHint | None:
        rid = str(req.rid)
        if rid in self.hints:
            return self.hints[rid]
        try:
            h = hint_from_req(req)
        except HintError as e:
            self.log.write(event="error", t=self.clock(), rid=rid, error=str(e))
            logger.warning("topas: request %s: %s (scheduled as a foreign request)", rid, e)
            h = None
        self.hints[rid] = h
        if h is not None:
            self._learn(req, h)
        return h

    def _learn(self, req: Any, h: WorkflowHint) -> None:
        if h.template_spec and h.template not in self.templates:
            try:
                t = template_from_json(h.template_spec)
                self.templates[t.name] = t
                self._learn_template_agents(t)
            except Exception as e:  # noqa: BLE001 - a bad spec must not kill the server
                self.log.write(event="error", t=self.clock(), rid=str(req.rid), error=f"template_spec: {e}")
        self.agents.setdefault(h.agent, h.prefix_tokens)
        if h.agent not in self.prefix_ids and h.prefix_tokens > 0:
            self.prefix_ids[h.agent] = req.origin_input_ids[: h.prefix_tokens]
        if h.task_id not in self.tasks:
            self.tasks[h.task_id] = TaskRecord(h.task_id, h.template, h.task_arrival)
            self.policy.on_event(TaskArrived(h.task_arrival, h.task_id, h.template))
        self.tasks[h.task_id].done = False

    def _running_reqs(self, running_batch: Any) -> list[Any]:
        reqs = [r for r in getattr(running_batch, "reqs", []) or [] if not r.finished()]
        chunked = getattr(self.scheduler, "chunked_req", None)
        if chunked is not None and all(r is not chunked for r in reqs):
            reqs.append(chunked)
        return reqs

    def _control(self, req: Any, now: float) -> None:
        """A `topas.control/v1` request: switch to a fresh policy instance (once per request)."""
        rid = str(req.rid)
        if rid in self.controls_done:
            return
        self.controls_done.add(rid)
        try:
            ctl = control_from_req(req)
        except HintError as e:
            self.log.write(event="error", t=now, rid=rid, error=str(e))
            return
        if ctl is None:
            return
        name, params = ctl
        try:
            policy = create_policy(name, params)
        except Exception as e:  # noqa: BLE001 - a bad switch keeps the current policy
            self.log.write(event="error", t=now, rid=rid, error=f"policy switch refused: {type(e).__name__}: {e}")
            logger.warning("topas: policy switch to %s refused: %s", name, e)
            return
        self.release_all_pins()
        self.policy = policy
        self.decision = None
        self.last_signature = None
        reset = self.reset_workflow_state()
        self.log.write(event="policy", t=now, rid=rid, policy=policy.name, params=_params_dict(policy), reset=reset)
        logger.info("topas plugin: switched to policy %s", policy.name)

    def reset_workflow_state(self) -> bool:
        """Forget tasks, hints, learned templates and agent prefixes, so that the next replay
        (task ids restart at 0, prefix lengths may differ) starts clean. Only when no
        workflow request is live; returns whether it reset."""
        sched = self.scheduler
        present = {str(r.rid) for r in sched.waiting_queue}
        present |= {str(r.rid) for r in self._running_reqs(getattr(sched, "running_batch", None))}
        if any(rid in present for rid in self.live):
            return False
        for d in (self.live, self.tasks, self.hints, self.ready_at, self.admitted_at, self.admitted_info, self.last_infos):
            d.clear()
        self.templates = dict(load_templates(os.environ.get(ENV_TEMPLATES)))
        self.agents = {}
        for t in self.templates.values():
            self._learn_template_agents(t)
        self.prefix_ids = {}
        return True

    def observe(self, running_batch: Any, now: float) -> tuple[list[Any], list[Any]]:
        """Visible (workflow) waiting and running requests; emits ready / finished events."""
        for r in self.scheduler.waiting_queue:
            if self.hint(r) is None and getattr(r, "kv_hints", None) is not None:
                self._control(r, now)
        waiting = [r for r in self.scheduler.waiting_queue if self.hint(r) is not None]
        running = [r for r in self._running_reqs(running_batch) if self.hint(r) is not None]
        present = {str(r.rid) for r in waiting} | {str(r.rid) for r in running}
        gone = [(rid, self.live.pop(rid)) for rid in [rid for rid in self.live if rid not in present]]
        for rid, req in gone:
            self._finish(rid, req, now)
        for r in waiting:
            rid = str(r.rid)
            if rid not in self.ready_at:
                h = self.hints[rid]
                self.ready_at[rid] = h.ready_time if h.ready_time is not None else now
                info = request_info(r, h, probe=self.probe, ready_time=self.ready_at[rid], running=False)
                self.policy.on_event(RequestReady(now, info))
            self.live[rid] = r
        for r in running:
            rid = str(r.rid)
            self.live[rid] = r
            if rid not in self.ready_at:  # admitted without our seeing it wait (e.g. first pass)
                h = self.hints[rid]
                self.ready_at[rid] = h.ready_time if h.ready_time is not None else now
            self.admitted_at.setdefault(rid, now)
        return waiting, running

    def _finish(self, rid: str, req: Any, now: float) -> None:
        h = self.hints.get(rid)
        reason = getattr(req, "finished_reason", None)
        if h is None or reason is None:
            return
        aborted = type(reason).__name__ == "FINISH_ABORT"
        admitted = self.admitted_at.get(rid, now)
        service = max(0.0, now - admitted)
        rec = self.tasks.get(h.task_id)
        if rec is not None and not aborted:
            rec.finished_nodes.append(h.node)
            rec.stage_done[h.stage] = rec.stage_done.get(h.stage, 0) + 1
            rec.attained_service += service
        others = any(self.hints.get(o) is not None and self.hints[o].task_id == h.task_id for o in self.live)
        task_done = not h.downstream_agents and not others
        if rec is not None and not others:
            rec.done = True
        info = self.admitted_info.pop(rid, None) or self.last_infos.get(rid)
        if info is None:
            info = request_info(req, h, probe=None, ready_time=self.ready_at.get(rid, now), running=True, admitted_time=admitted)
        self.log.write(
            event="finished", t=now, rid=rid, task_id=h.task_id, node=h.node, output_tokens=len(req.output_ids),
            service_s=service, aborted=aborted,
        )
        if not aborted:
            self.policy.on_event(RequestFinished(now, info, len(req.output_ids), service, task_done))
        for d in (self.ready_at, self.admitted_at, self.hints, self.last_infos):
            d.pop(rid, None)

    # -- the pass --------------------------------------------------------------------------

    def before_pass(self, running_batch: Any) -> None:
        now = self.clock()
        waiting, running = self.observe(running_batch, now)
        chunked = getattr(self.scheduler, "chunked_req", None)
        signature = (
            tuple(sorted(str(r.rid) for r in waiting)),
            tuple(sorted(str(r.rid) for r in running)),
            None if chunked is None else str(chunked.rid),
        )
        if signature != self.last_signature or self.decision is None or self.trigger == "pass":
            self._decide(waiting, running, now, chunked, running_batch)
            self.last_signature = signature
        else:
            self.reused += 1
        self.original_queue = list(self.scheduler.waiting_queue)
        self.held = []
        self.admitted_this_pass = []
        self.in_pass = True

    def _decide(self, waiting: list[Any], running: list[Any], now: float, chunked: Any, running_batch: Any) -> None:
        if not waiting and not running:
            # Nothing of ours to schedule: keep the last pins (idle), admit nothing.
            last = self.decision
            self.decision = Decision(pin=last.pin, stop_at_first_misfit=last.stop_at_first_misfit) if last else Decision()
            return
        t0 = time.perf_counter()
        w_infos = [
            request_info(r, self.hints[str(r.rid)], probe=self.probe, ready_time=self.ready_at[str(r.rid)], running=False)
            for r in waiting
        ]
        r_infos = [
            request_info(
                r, self.hints[str(r.rid)], probe=None, ready_time=self.ready_at.get(str(r.rid), now), running=True,
                admitted_time=self.admitted_at.get(str(r.rid)), chunked=r is chunked,
            )
            for r in running
        ]
        self.last_infos = {i.rid: i for i in w_infos + r_infos}
        capacity: EngineCapacity = engine_capacity(self.scheduler, self.probe)
        prefixes = prefix_states(self.agents, self.prefix_ids, self.probe, self.pins, r_infos)
        view = build_view(
            now=now, waiting=w_infos, running=r_infos, tasks=self.tasks, templates=self.templates,
            prefixes=prefixes, capacity=capacity, costs=self.costs,
        )
        t1 = time.perf_counter()
        try:
            decision = self.policy.schedule(view)
        except Exception:
            self.log.write(event="error", t=now, error="policy.schedule raised", traceback=traceback.format_exc())
            raise
        t2 = time.perf_counter()
        self.decision = decision
        self.decisions += 1
        preempted = self._apply_preempt(decision, running_batch) if decision.preempt else []
        not_applied = self._apply_pins(decision)
        self.log.write(
            event="decision",
            t=now,
            n=self.decisions,
            wall_s=t2 - t1,
            view_s=t1 - t0,
            reused_before=self.reused,
            waiting=[i.rid for i in view.waiting],
            running=[i.rid for i in view.running],
            admit=list(decision.admit),
            stop_at_first_misfit=decision.stop_at_first_misfit,
            pin=None if decision.pin is None else sorted(decision.pin),
            offload=sorted(decision.offload),
            drop=sorted(decision.drop),
            preempt=list(decision.preempt),
            preempted=preempted,
            resident=sorted(a for a, p in prefixes.items() if p.device_tokens >= p.tokens),
            pinned=sorted(self.pins),
            not_applied=not_applied,
            kv_used=capacity.kv_used_tokens,
            kv_evictable=capacity.kv_evictable_tokens,
        )
        self.reused = 0

    def _apply_pins(self, decision: Decision) -> dict[str, list[str]]:
        # A held pin keeps its prefix on device; if the prefix is gone the tree was reset
        # (/flush_cache): the lock died with it, forget the handle without unlocking.
        for agent in list(self.pins):
            ids = self.prefix_ids.get(agent)
            if ids is None or self.probe.device_tokens(ids) < self.pins[agent].tokens:
                del self.pins[agent]
                self.log.write(event="pin_lost", t=self.clock(), agent=agent)
        to_pin, to_unpin = pin_changes(self.pins, decision.pin, decision.offload, decision.drop)
        for agent in sorted(to_unpin):
            self.probe.unpin(self.pins.pop(agent))
        missing = []
        for agent in sorted(to_pin):
            ids = self.prefix_ids.get(agent)
            handle = self.probe.pin(ids) if ids is not None else None
            if handle is None:
                missing.append(agent)  # not resident on device yet: retried at the next decision
            else:
                self.pins[agent] = handle
        not_applied: dict[str, list[str]] = {}
        if missing:
            not_applied["pin_not_resident"] = missing
        moved = sorted(decision.offload | decision.drop)
        if moved:
            not_applied["offload_drop_left_to_lru"] = moved
        return not_applied

    def _apply_preempt(self, decision: Decision, batch: Any) -> list[str]:
        """Release running requests named by the decision and requeue them (generated
        tokens kept; their KV is recomputed), mirroring `PrefillAdder.preempt_to_schedule`."""
        sched = self.scheduler
        want = set(decision.preempt)
        chunked = getattr(sched, "chunked_req", None)
        reqs = list(batch.reqs)
        victims = [
            i for i, r in enumerate(reqs)
            if str(r.rid) in want and not r.finished() and r is not chunked and getattr(r, "beam_group", None) is None
        ]
        if not victims:
            return []
        keep = [i for i in range(len(reqs)) if i not in set(victims)]
        released = []
        for n, i in enumerate(victims):
            batch.release_req(i, len(reqs) - n - 1)
            released.append(reqs[i])
        batch.filter_batch(keep_indices=keep)
        batch.batch_is_full = False
        for r in released:
            sched._add_request_to_queue(r, is_retracted=True)
            self.admitted_at.pop(str(r.rid), None)
        rids = [str(r.rid) for r in released]
        self.log.write(event="preempted", t=self.clock(), rids=rids)
        return rids

    def reorder(self, waiting_queue: list[Any]) -> None:
        """calc_priority: rewrite the queue in place to the decision's admission order."""
        if self.decision is None:
            return
        visible = [str(r.rid) for r in waiting_queue if self.hints.get(str(r.rid)) is not None]
        queue, held = order_waiting_queue(waiting_queue, self.decision, visible)
        waiting_queue[:] = queue
        self.held = held

    def after_pass(self) -> None:
        now = self.clock()
        sched = self.scheduler
        if self.held:
            sched.waiting_queue = restore_order(sched.waiting_queue, self.held, self.original_queue)
        admitted = [rid for rid in self.admitted_this_pass if self.hints.get(rid) is not None]
        for rid in admitted:
            self.admitted_at[rid] = now
            info = self.last_infos.get(rid)
            if info is not None:
                self.admitted_info[rid] = _with_admission(info, now)
        if admitted:
            self.log.write(event="admitted", t=now, rids=admitted, held=len(self.held))
        self.in_pass = False
        self.held = []
        self.original_queue = []
        self.admitted_this_pass = []

    def release_all_pins(self) -> None:
        for agent in list(self.pins):
            try:
                self.probe.unpin(self.pins.pop(agent))
            except Exception:  # noqa: BLE001 - shutting down
                pass


def _with_admission(info: RequestInfo, now: float) -> RequestInfo:
    from dataclasses import replace

    return replace(info, admitted_time=now)


# ----------------------------------------------------------------------------------------------
# Iteration log: the engine's timeline, observed after each batch result
# ----------------------------------------------------------------------------------------------


class IterationLog:
    """One JSONL record per prefill iteration or decode stretch, written by the scheduler.

    Timing follows SGLang 0.5.23's own step accounting (`Scheduler._record_step_counters`):
    an iteration ends when its `process_batch_result` returns; it starts where the previous
    one ended when the two are back to back (launched less than `max_gap_s` after it, or
    before it ended as with the overlap scheduler, and not after an idle pass), else at its
    own launch (`batch.launch_ts`). So busy time is tiled without gaps (the scheduler's own
    work between iterations counts, as SGLang's decode cadence does) and idle time is
    never counted. With overlap (GPU default) the duration is the result-to-result cadence.

    Record fields (times: wall clock `time.time()` seconds):
      kind "prefill" | "decode", start, duration, steps (decode iterations merged into the
      stretch: consecutive, same batch size, < `max_stretch_s`), batch_size, tokens (as
      the simulator: prefill: cached + computed context of the batch's requests after the
      iteration; decode: mean context per request at the stretch start), extend_tokens
      (prefill: new tokens computed), kv_used_tokens, tree_tokens, evictable_tokens,
      host_tokens, waiting, running (after the iteration), first (rids whose first
      output token this prefill produced), finished (rids that finished in it).
    """

    def __init__(self, path: str | None, max_stretch_s: float = 0.5, max_gap_s: float = 0.02) -> None:
        self._f = open(path, "a", encoding="utf-8", buffering=1) if path else None
        self.max_stretch_s = max_stretch_s
        self.max_gap_s = max_gap_s
        self.prev_end: float | None = None  # monotonic
        self.pending: dict[str, Any] | None = None  # open decode stretch
        self.first_seen: set[str] = set()
        self.probe: CacheProbe | None = None
        self.errors = 0

    def _write(self, rec: Mapping[str, Any]) -> None:
        if self._f is not None:
            self._f.write(json.dumps(rec, separators=(",", ":"), default=_json_default) + "\n")

    def flush(self) -> None:
        if self.pending is not None:
            self._write(self.pending)
            self.pending = None

    def _state(self, scheduler: Any) -> dict[str, Any]:
        if self.probe is None or self.probe.cache is not scheduler.tree_cache:
            self.probe = CacheProbe(scheduler.tree_cache)
        cap = engine_capacity(scheduler, self.probe)
        cache = scheduler.tree_cache
        try:
            tree = int(cache.evictable_size()) + int(cache.protected_size())
        except Exception:  # noqa: BLE001 - a cache without the counters
            tree = None
        running = getattr(getattr(scheduler, "running_batch", None), "reqs", None) or []
        return {
            "kv_used_tokens": cap.kv_used_tokens,
            "tree_tokens": tree,
            "evictable_tokens": cap.kv_evictable_tokens,
            "host_tokens": cap.host_used_tokens if cap.host_capacity_tokens else None,
            "waiting": len(scheduler.waiting_queue),
            "running": len(running),
        }

    def observe(self, scheduler: Any, batch: Any) -> None:
        end_m = time.monotonic()
        offset = time.time() - end_m  # monotonic -> wall clock
        mode = batch.forward_mode
        if mode.is_extend():
            kind = "prefill"
        elif mode.is_decode():
            kind = "decode"
        else:  # idle / prebuilt batches: no model work of ours
            return
        launch = batch.launch_ts if batch.launch_ts is not None else end_m
        # back-to-back with the previous iteration (overlap: launched before it ended; no
        # overlap: only the scheduler's own gap in between): it starts where that one ended
        contiguous = (
            self.prev_end is not None
            and not getattr(batch, "after_idle_gap", False)
            and launch - self.prev_end <= self.max_gap_s
        )
        start_m = self.prev_end if contiguous else launch
        self.prev_end = end_m
        reqs = list(batch.reqs)
        bs = len(reqs)
        finished = [str(r.rid) for r in reqs if r.finished()]
        state = self._state(scheduler)
        if kind == "prefill":
            self.flush()
            first = []
            for r in reqs:
                rid = str(r.rid)
                if rid not in self.first_seen and len(r.output_ids) >= 1:
                    self.first_seen.add(rid)
                    first.append(rid)
            extend = int(sum(batch.extend_lens)) if batch.extend_lens is not None else None
            prefix = int(sum(batch.prefix_lens)) if batch.prefix_lens is not None else None
            tokens = extend + prefix if extend is not None and prefix is not None else None
            self._write({"kind": kind, "start": start_m + offset, "duration": end_m - start_m, "steps": 1,
                         "batch_size": bs, "tokens": tokens, "extend_tokens": extend, **state, "first": first,
                         "finished": finished})
            return
        p = self.pending
        if (
            p is not None
            and contiguous
            and p["batch_size"] == bs
            and (end_m + offset) - p["start"] < self.max_stretch_s
        ):
            p["duration"] = (end_m + offset) - p["start"]
            p["steps"] += 1
            p.update(state)
            p["finished"] += finished
        else:
            self.flush()
            seq = batch.seq_lens_cpu
            try:
                ctx = float(seq.sum().item()) / bs if seq is not None and bs else None
            except Exception:  # noqa: BLE001
                ctx = None
            self.pending = {"kind": kind, "start": start_m + offset, "duration": end_m - start_m, "steps": 1,
                            "batch_size": bs, "tokens": ctx, **state, "first": [], "finished": finished}
        if finished:  # the batch shrinks (or the engine goes idle): close the stretch now
            self.flush()

    def close(self) -> None:
        self.flush()
        if self._f is not None:
            self._f.close()
            self._f = None


# ----------------------------------------------------------------------------------------------
# Hooks and registration
# ----------------------------------------------------------------------------------------------

_POLICY: Policy | None = None
_CONTROLLER: Controller | None = None
_LOG: DecisionLog | None = None
_ITER_LOG: IterationLog | None = None


def _controller(scheduler: Any) -> Controller:
    global _CONTROLLER, _LOG, _POLICY
    if _CONTROLLER is None or _CONTROLLER.scheduler is not scheduler:
        if _POLICY is None:
            _POLICY = policy_from_env()
        _LOG = _LOG or DecisionLog(os.environ.get(ENV_DECISION_LOG))
        _CONTROLLER = Controller(scheduler, _POLICY, _LOG, templates=load_templates(os.environ.get(ENV_TEMPLATES)))
        _LOG.write(
            event="start", t=time.time(), pid=os.getpid(), policy=_POLICY.name,
            params=_params_dict(_POLICY), tree_cache=type(scheduler.tree_cache).__name__,
            max_running_requests=getattr(scheduler, "max_running_requests", None),
            kv_capacity_tokens=int(scheduler.token_to_kv_pool_allocator.size),
            bytes_per_token=_CONTROLLER.costs.bytes_per_token,
            trigger=_CONTROLLER.trigger,
        )
        logger.info("topas plugin: policy %s active in scheduler pid %d", _POLICY.name, os.getpid())
    return _CONTROLLER


def _params_dict(policy: Policy) -> Any:
    import dataclasses

    p = policy.params
    return dataclasses.asdict(p) if dataclasses.is_dataclass(p) else str(p)


def around_prefill_pass(original, scheduler, *args, **kwargs):
    running_batch = kwargs.get("running_batch", args[1] if len(args) > 1 else None)
    ctl = _controller(scheduler)
    ctl.before_pass(running_batch if running_batch is not None else scheduler.running_batch)
    try:
        return original(scheduler, *args, **kwargs)
    finally:
        ctl.after_pass()


def around_calc_priority(original, policy_obj, waiting_queue, *args, **kwargs):
    result = original(policy_obj, waiting_queue, *args, **kwargs)
    ctl = _CONTROLLER
    if ctl is not None and ctl.in_pass and waiting_queue is ctl.scheduler.waiting_queue:
        ctl.reorder(waiting_queue)
    return result


def around_add_one_req(original, adder, req, *args, **kwargs):
    result = original(adder, req, *args, **kwargs)
    ctl = _CONTROLLER
    if ctl is None or not ctl.in_pass:
        return result
    can_run = adder.can_run_list
    if can_run and can_run[-1] is req:
        ctl.admitted_this_pass.append(str(req.rid))
        return result
    from sglang.srt.managers.schedule_policy import AddReqResult

    if (
        result == AddReqResult.NO_TOKEN
        and ctl.decision is not None
        and not ctl.decision.stop_at_first_misfit
        and ctl.hints.get(str(req.rid)) is not None
        and not getattr(getattr(req, "kv", None), "holds_mamba", False)
        and adder.budget_state() == AddReqResult.CONTINUE
    ):
        return AddReqResult.CONTINUE  # skip the misfit, keep walking the decision's order
    return result


def around_process_batch_result(original, scheduler, batch, *args, **kwargs):
    result = original(scheduler, batch, *args, **kwargs)
    global _ITER_LOG
    if _ITER_LOG is None:
        _ITER_LOG = IterationLog(os.environ.get(ENV_ITERATION_LOG))
    try:
        _ITER_LOG.observe(scheduler, batch)
    except Exception as e:  # noqa: BLE001 - observing must never break serving
        _ITER_LOG.errors += 1
        if _ITER_LOG.errors <= 3:
            logger.warning("topas iteration log: %s: %s", type(e).__name__, e)
    return result


def register() -> None:
    """Entry point called by sglang's `load_plugins()` in each server process."""
    global _POLICY
    if not os.environ.get(ENV_POLICY, "").strip():
        return
    try:
        _POLICY = policy_from_env()
        load_templates(os.environ.get(ENV_TEMPLATES))
        if os.environ.get(ENV_TRIGGER, "change") not in TRIGGERS:
            raise PluginConfigError(f"{ENV_TRIGGER} must be one of {', '.join(TRIGGERS)}")
        from topas.engines.sglang.costs import load_cost_model

        load_cost_model()
    except Exception as e:  # noqa: BLE001 - turn any config problem into a one-line exit
        # load_plugins() swallows Exception; SystemExit stops the server at launch instead
        # of serving silently without the policy.
        raise SystemExit(f"topas sglang plugin: {type(e).__name__}: {e}") from None
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET_PASS, around_prefill_pass, HookType.AROUND)
    HookRegistry.register(TARGET_PRIORITY, around_calc_priority, HookType.AROUND)
    HookRegistry.register(TARGET_ADD, around_add_one_req, HookType.AROUND)
    if os.environ.get(ENV_ITERATION_LOG, "").strip():
        HookRegistry.register(TARGET_RESULT, around_process_batch_result, HookType.AROUND)
