"""The plugin's controller, one per scheduler process: observes SGLang's waiting queue and
running batch, tells the policy what happened (task arrived, request ready / finished),
asks it for a decision when something changed, and applies the decision (preemptions,
pins, the waiting queue's order for this pass, held-back requests restored afterwards).

Decision log events (JSONL, `TOPAS_DECISION_LOG`): `start` (written by hooks.py),
`policy` (switch), `decision` (t, n, wall_s of `policy.schedule`, view_s, reused_before,
waiting, running, admit, pin, offload, drop, preempt, preempted, resident, pinned,
not_applied, kv_used, kv_evictable), `admitted` (rids in admission order), `preempted`,
`finished`, `pin_lost`, `error`.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from topas.engines.sglang.hints import HintError, WorkflowHint, control_from_req, hint_from_req, template_from_json
from topas.engines.sglang.jsonl import JsonlWriter
from topas.engines.sglang.plugin.adapter import (
    EngineCapacity,
    TaskRecord,
    build_view,
    engine_capacity,
    order_waiting_queue,
    prefix_states,
    release_running,
    request_info,
    restore_order,
)
from topas.engines.sglang.plugin.cache_probe import CacheProbe
from topas.engines.sglang.plugin.pins import PinSet
from topas.engines.sglang.plugin_env import ENV_TEMPLATES, ENV_TRIGGER, load_templates, params_dict
from topas.policy.decision import Decision
from topas.policy.events import RequestFinished, RequestReady, TaskArrived
from topas.policy.registry import Policy, create_policy
from topas.policy.view import RequestInfo
from topas.workflow import WorkflowTemplate

logger = logging.getLogger("topas.sglang")


class Controller:
    """Observes the scheduler, asks the policy, applies its decisions."""

    def __init__(
        self,
        scheduler: Any,
        policy: Policy,
        log: JsonlWriter,
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
        self.pins = PinSet(self.probe, on_lost=lambda agent: self.log.write(event="pin_lost", t=self.clock(), agent=agent))
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
        self.log.write(event="policy", t=now, rid=rid, policy=policy.name, params=params_dict(policy), reset=reset)
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
        return self.pins.apply(decision, self.prefix_ids)

    def _apply_preempt(self, decision: Decision, batch: Any) -> list[str]:
        """Release running requests named by the decision and requeue them."""
        released = release_running(self.scheduler, batch, decision.preempt)
        if not released:
            return []
        for r in released:
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
        self.pins.release_all()


def _with_admission(info: RequestInfo, now: float) -> RequestInfo:
    return replace(info, admitted_time=now)
