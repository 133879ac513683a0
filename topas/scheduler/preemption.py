"""TOPAS's preemption candidates and their cost J_redo + J_revoke (docs/topas.md), a mixin of `Topas`."""

from __future__ import annotations

from dataclasses import dataclass, field

from topas.policy import RequestInfo, SchedulerView
from topas.policy.progress import remaining_calls
from topas.scheduler import score as S
from topas.scheduler.digest import stage_counts
from topas.scheduler.repair import Candidates, RunningOption


@dataclass
class DecisionContext:
    """Per-decision facts shared by the helpers of `Topas.schedule`."""

    view: SchedulerView
    active: dict  # task -> waiting + running calls per stage (the tasks scored or running; Topas._task_states)
    waiting_by_task: dict
    running_by_task: dict
    wait_s: float
    step_s: float
    remaining: dict = field(default_factory=dict)  # task -> remaining calls per stage (filled by Topas._task_states)


class PreemptionCosts:
    """Needs from the policy: params, est, credit, _kv, _task_state, _key_tail, _digests, _model, _victims."""

    def _running_options(self, ctx: DecisionContext) -> Candidates:
        """Preemption candidates with their cost J_redo + J_revoke. The revoked credit is the
        larger of the credit recorded at admission (rescaled to the current W and aging) and
        what the request's progress is worth now (its task's path grows by that much if it
        goes back to waiting), so a request admitted by the work-conserving fill is not free.
        Only the trial order is computed for all of them; an option is built when first tried."""
        p, view = self.params, ctx.view
        running = view.running
        redos, kvs, credits, keys = [], [], [], []
        kv_of, credit_of, step_s = self._kv, self.credit.get, ctx.step_s
        for r in running:
            redo = S.j_redo([r.generated_tokens], step_s) if p.use_redo else 0.0
            kv, credit = kv_of(r), credit_of(r.rid, 0.0)
            redos.append(redo)
            kvs.append(kv)
            credits.append(credit)
            keys.append((redo + credit) / max(kv, 1))

        def build(i: int) -> RunningOption:
            r, redo, credit = running[i], redos[i], credits[i]
            age = S.aging(view.now, r.task_arrival, p.rho, p.h_age) if p.use_aging else 1.0

            def cost() -> float:
                c = redo
                if p.use_revoke:
                    c += S.j_revoke([max(credit, self._victim_gain(ctx, r) / ctx.wait_s) * ctx.wait_s * age])
                return c * (1.0 + p.preempt_margin)

            # the same expression with the recorded credit alone: never above the cost (rounding is monotone)
            lower = (redo + (credit * ctx.wait_s * age if p.use_revoke else 0.0)) * (1.0 + p.preempt_margin)
            return RunningOption(r.rid, r.task_id, kvs[i], cost, order_key=keys[i], lower_s=lower)

        return Candidates(keys, build)

    def _victim_gain(self, ctx: DecisionContext, r: RequestInfo) -> float:
        """Delta_task of re-admitting r if it were sent back to waiting (unweighted seconds)."""
        view = ctx.view
        prog = view.tasks.get(r.task_id)
        if prog is None:
            return 0.0
        digest = self._digests.get(r.task_id)  # valid this decision: its running calls and waiting calls are the same
        tail = self._key_tail(ctx.wait_s, ctx.step_s)
        if digest is not None:
            hit = digest.victims.get(r.rid)
            if hit is not None and hit[0] == tail:
                return hit[1]
        tpl = view.templates[prog.template]
        rem = ctx.remaining.get(r.task_id)
        if rem is None:
            rem = remaining_calls(tpl, prog, ctx.active.get(r.task_id, {}))
        waiting = stage_counts(ctx.waiting_by_task.get(r.task_id, []))
        waiting[r.stage] = waiting.get(r.stage, 0) + 1
        running = [x for x in ctx.running_by_task.get(r.task_id, []) if x.rid != r.rid]
        st = self._task_state(tpl, rem, waiting, running, ctx.wait_s, ctx.step_s)
        key = (st, r.stage)
        gain = self._victims.get(key)
        if gain is None:
            model = self._model(tpl)
            admitted = {s: n for s, n in waiting.items() if s != r.stage}
            admitted[r.stage] = waiting[r.stage] - 1
            gain = max(model.longest(st, admitted) - model.longest(st, waiting), 0.0)
            self._victims.put(key, gain)
        if digest is not None:
            digest.victims[r.rid] = (tail, gain)
        return gain
