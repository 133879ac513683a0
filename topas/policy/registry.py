"""Policy base class and the registry from config name to policy class.

A policy declares its hyper-parameters as a dataclass `Params`; `create_policy`
validates the configured values against it, so a typo in
`scheduler.params.<name>` is a one-line error at start, not a silent default.
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from topas.policy.decision import Decision
from topas.policy.events import Event
from topas.policy.view import SchedulerView


class UnknownPolicyError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class NoParams:
    pass


class Policy(ABC):
    """Engine-neutral scheduling policy. Subclasses set `name` and, if they have
    hyper-parameters, a frozen dataclass `Params`."""

    name: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    # True only for policies that read information a real scheduler cannot have.
    oracle: ClassVar[bool] = False

    def __init__(self, params: Any = None) -> None:
        self.params = params if params is not None else self.Params()

    def on_event(self, event: Event) -> None:
        """Learn from an event (task arrival, request ready / finished). Default: ignore."""

    @abstractmethod
    def schedule(self, view: SchedulerView) -> Decision:
        """Return the decision for this scheduling point."""


_REGISTRY: dict[str, type[Policy]] = {}
# Modules whose import registers the built-in policies.
_BUILTIN_MODULES = ("baselines", "topas.scheduler")

P = TypeVar("P", bound=type[Policy])


def register_policy(name: str) -> Callable[[P], P]:
    def deco(cls: P) -> P:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"policy name '{name}' registered twice")
        if "oracle" in name and not cls.oracle or cls.oracle and "oracle" not in name:
            raise ValueError(f"policy '{name}': oracles (and only oracles) carry 'oracle' in their name")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_builtins() -> None:
    for mod in _BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # a package not written yet must not break the others
            if e.name != mod:
                raise


def policy_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def policy_class(name: str) -> type[Policy]:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(f"unknown scheduler '{name}'; known: {', '.join(sorted(_REGISTRY))}") from None


def make_params(cls: type[Policy], params: Mapping[str, Any] | None) -> Any:
    params = dict(params or {})
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise UnknownPolicyError(
            f"scheduler '{cls.name}': unknown parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(fields)) or '(none)'}"
        )
    return cls.Params(**params)


def create_policy(name: str, params: Mapping[str, Any] | None = None) -> Policy:
    cls = policy_class(name)
    return cls(make_params(cls, params))
