"""The engine-neutral scheduling API: what a policy sees (view), what it returns
(decision), the events it learns from, the online estimators it may share, and the
registry from config name to policy class. Policies import only this package and
`topas.workflow`; engines translate their own state into a view and apply decisions."""

from topas.policy.decision import Decision
from topas.policy.events import Event, RequestFinished, RequestReady, TaskArrived
from topas.policy.params import check_ranges
from topas.policy.registry import (
    Policy,
    UnknownPolicyError,
    builtin_policy_names,
    create_policy,
    policy_names,
    register_policy,
)
from topas.policy.view import CostModel, PrefixState, RequestInfo, Residency, SchedulerView, TaskProgress

__all__ = [
    "CostModel",
    "Decision",
    "Event",
    "Policy",
    "PrefixState",
    "RequestFinished",
    "RequestInfo",
    "RequestReady",
    "Residency",
    "SchedulerView",
    "TaskArrived",
    "TaskProgress",
    "UnknownPolicyError",
    "builtin_policy_names",
    "check_ranges",
    "create_policy",
    "policy_names",
    "register_policy",
]
