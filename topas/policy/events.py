"""Events a policy receives to learn online estimates (docs/policy_contract.md).

Only realized facts: a finished call's output length and service time are
observable once it has finished; a pending call's are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from topas.policy.view import RequestInfo


@dataclass(frozen=True, slots=True)
class TaskArrived:
    time: float
    task_id: int
    template: str


@dataclass(frozen=True, slots=True)
class RequestReady:
    time: float
    request: RequestInfo


@dataclass(frozen=True, slots=True)
class RequestFinished:
    time: float
    request: RequestInfo  # as it was at its last admission
    output_tokens: int  # realized, now observable
    service_s: float  # admission (last) -> finish, engine seconds
    task_done: bool  # this was the task's last call


Event = TaskArrived | RequestReady | RequestFinished
