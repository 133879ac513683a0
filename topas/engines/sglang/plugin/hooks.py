"""SGLang 0.5.23 plugin: run an engine-neutral topas policy inside the real scheduler.

Entry point `sglang.srt.plugins: topas = topas.engines.sglang.plugin.hooks:register`
(pyproject). SGLang calls `load_plugins()` in every server process (engine, scheduler,
detokenizer); `register()` does nothing unless `TOPAS_POLICY` is set, then validates
the policy configuration (a bad name or parameter stops the server at launch with a
one-line message) and registers three hooks with
`sglang.srt.plugins.hook_registry.HookRegistry`; they only act in the scheduler process.
`TOPAS_ITERATION_LOG` alone (with or without a policy) registers the fourth hook, so a
plain SGLang server can be profiled (`tools/profiler.py`).

Modules (paths under topas/engines/sglang/): `plugin/controller.py` (observe, decide,
apply; the decision log's events), `plugin/iteration_log.py` (hook 4's records),
`plugin_env.py` (the environment below), `plugin/adapter.py` / `hints.py` /
`plugin/cache_probe.py` / `plugin/pins.py` (translation to and from SGLang).

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
4. (only with TOPAS_ITERATION_LOG, also without TOPAS_POLICY) AROUND
   `sglang.srt.managers.scheduler.Scheduler.process_batch_result`: after the original,
   one record per prefill iteration or decode stretch (`IterationLog`); observing never
   raises into the scheduler.

Decision.offload / Decision.drop: SGLang 0.5.23 has no public per-node demote or drop
call (`UnifiedRadixCache` evicts through its LRU walk; `_evict_device_leaf` and
`tree_core.demote` are internals); the plugin applies them as "release the pin" and logs
them, leaving the eviction to SGLang's LRU (see the decision log's `not_applied`).

Environment (set by `client/server.py`):
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

import logging
import os
import time
from typing import Any

from topas.engines.sglang.jsonl import JsonlWriter
from topas.engines.sglang.plugin.controller import Controller
from topas.engines.sglang.plugin.iteration_log import IterationLog
from topas.engines.sglang.plugin_env import (
    ENV_DECISION_LOG,
    ENV_ITERATION_LOG,
    ENV_POLICY,
    ENV_TEMPLATES,
    ENV_TRIGGER,
    TRIGGERS,
    PluginConfigError,
    load_templates,
    params_dict,
    policy_from_env,
)
from topas.policy.registry import Policy

logger = logging.getLogger("topas.sglang")

TARGET_PASS = "sglang.srt.managers.scheduler.Scheduler._get_new_batch_prefill_raw"
TARGET_PRIORITY = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
TARGET_ADD = "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req"
TARGET_RESULT = "sglang.srt.managers.scheduler.Scheduler.process_batch_result"

_POLICY: Policy | None = None
_CONTROLLER: Controller | None = None
_LOG: JsonlWriter | None = None
_ITER_LOG: IterationLog | None = None


def _controller(scheduler: Any) -> Controller:
    global _CONTROLLER, _LOG, _POLICY
    if _CONTROLLER is None or _CONTROLLER.scheduler is not scheduler:
        if _POLICY is None:
            _POLICY = policy_from_env()
        _LOG = _LOG or JsonlWriter(os.environ.get(ENV_DECISION_LOG))
        _CONTROLLER = Controller(scheduler, _POLICY, _LOG, templates=load_templates(os.environ.get(ENV_TEMPLATES)))
        _LOG.write(
            event="start", t=time.time(), pid=os.getpid(), policy=_POLICY.name,
            params=params_dict(_POLICY), tree_cache=type(scheduler.tree_cache).__name__,
            max_running_requests=getattr(scheduler, "max_running_requests", None),
            kv_pool_tokens=int(scheduler.token_to_kv_pool_allocator.size),
            bytes_per_token=_CONTROLLER.costs.bytes_per_token,
            trigger=_CONTROLLER.trigger,
        )
        logger.info("topas plugin: policy %s active in scheduler pid %d", _POLICY.name, os.getpid())
    return _CONTROLLER


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
    policy = bool(os.environ.get(ENV_POLICY, "").strip())
    iterations = bool(os.environ.get(ENV_ITERATION_LOG, "").strip())
    if not policy and not iterations:
        return
    if policy:
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

    if policy:
        HookRegistry.register(TARGET_PASS, around_prefill_pass, HookType.AROUND)
        HookRegistry.register(TARGET_PRIORITY, around_calc_priority, HookType.AROUND)
        HookRegistry.register(TARGET_ADD, around_add_one_req, HookType.AROUND)
    if iterations:
        HookRegistry.register(TARGET_RESULT, around_process_batch_result, HookType.AROUND)
