"""TOPAS's hyper-parameters (conf/scheduler/topas.yaml holds the tuned values; docs/topas.md, "Parameters")."""

from __future__ import annotations

from dataclasses import dataclass

from topas.policy import check_ranges  # a RangeError names the field (scheduler.params.<field> at start)
from topas.policy.estimates import PRIOR_OUTPUT_TOKENS


@dataclass(frozen=True)
class TopasParams:
    beta: float = 1.0  # V_reuse weight
    rho: float = 16.0  # aging strength (tuned)
    h_age: float = 60.0  # aging time scale (s)
    M: int = 6  # enumerate every prefix subset when the free agent pool has at most M agents
    K: int = 64  # at most K admits + preempts per decision
    use_aging: bool = True  # ablation switch (topas_no_aging, topas_base)
    use_reuse: bool = True  # ablation switch (topas_no_reuse, topas_base)
    use_context: bool = True  # ablation switch (topas_no_context): J_admit's context term (a call's cached context at risk)
    use_remaining_work: bool = True  # ablation switch (topas_no_remaining_work): a task's weight x mean remaining work / its own
    tie_temperature: float = 0.25  # smooth-max temperature as a fraction of W
    wait_ewma: float = 0.2  # smoothing of the observed queueing delay W
    prior_output_tokens: float = PRIOR_OUTPUT_TOKENS  # workload-independent prior (docs/policy_contract.md)
    preempt_margin: float = 2.0  # hysteresis (tuned): preempt only for a gain above (1 + margin) x (redo + revoke)
    overdue_factor: float = 2.0  # a call waiting longer than this x max(W, its expected service) is scored outside R'
    consolidate_share: float = 0.65  # above this share of the pool locked by running calls' prefixes, the plan's agent
    # groups are ranked by the demand they serve (docs/topas.md, "Consolidation by demand"); >= 1: never

    def __post_init__(self) -> None:
        check_ranges(self, h_age="> 0", M=">= 0", K="> 0", beta=">= 0", rho=">= 0", preempt_margin=">= 0",
                     overdue_factor=">= 0", consolidate_share=">= 0", tie_temperature=">= 0", wait_ewma="in (0, 1]",
                     prior_output_tokens="> 0")
