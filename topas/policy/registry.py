"""Policy base class and the registry from config name to policy class.

A policy declares its hyper-parameters as a dataclass `Params`; `create_policy`
validates the configured values against it, so a typo in
`scheduler.params.<name>` is a one-line error at start, not a silent default.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from topas.checks import RangeError, integral, is_number
from topas.policy.decision import Decision
from topas.policy.events import Event
from topas.policy.view import SchedulerView


class UnknownPolicyError(ValueError):
    pass


class PolicyParamError(ValueError):
    """A scheduler parameter of the wrong type or out of range (one line naming scheduler.params.<field>)."""


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

    def on_event(self, event: Event) -> None:  # noqa: B027 - an optional hook, not abstract
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
    """Every registered name, including policies registered at run time (e.g. by tests)."""
    _load_builtins()
    return sorted(_REGISTRY)


def builtin_policy_names() -> list[str]:
    """The project's schedulers: the names registered by the built-in packages (baselines,
    TOPAS). Tests, grids and config checks derive their scheduler lists from this, so a new
    scheduler module is covered everywhere once it is imported by its package."""
    _load_builtins()
    return sorted(n for n, cls in _REGISTRY.items()
                  if any(cls.__module__ == m or cls.__module__.startswith(m + ".") for m in _BUILTIN_MODULES))


def parent_policy(name: str) -> str | None:
    """The registered policy `name`'s class extends (a variant: an ablation, a reference row), or None."""
    base = policy_class(name).__mro__[1]
    return base.name if base in _REGISTRY.values() else None


def config_node(name: str) -> dict[str, Any]:
    """A scheduler's parameter defaults as a Hydra config node, from its Params dataclass (the one place they are
    written): stored as `scheduler/schema/<name>` (hydra_plugins/topas_conf) and composed by
    conf/scheduler/<name>.yaml, which adds the tuned values only. A variant's node holds only the defaults it
    changes (its file composes its parent's first), so a run's config lists every parameter once."""
    cls = policy_class(name)
    params = dataclasses.asdict(cls.Params())
    parent = parent_policy(name)
    if parent is not None:
        inherited = dataclasses.asdict(policy_class(parent).Params())
        params = {k: v for k, v in params.items() if k not in inherited or inherited[k] != v}
    return {"name": name, "params": params}


def policy_class(name: str) -> type[Policy]:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(f"unknown scheduler '{name}'; known: {', '.join(sorted(_REGISTRY))}") from None


def _check_type(key: str, hint: Any, v: Any) -> Any:
    """`v` checked against a Params field's annotation (bool, int, float, str, Literal, Optional);
    an integral float is accepted for an int (6.0 -> 6). Other annotations are not checked."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return v
        inner = [a for a in args if a is not type(None)]
        return _check_type(key, inner[0], v) if len(inner) == 1 else v
    if origin is typing.Literal:
        if v not in args:
            raise PolicyParamError(f"{key} must be one of {', '.join(map(repr, args))}, got {v!r}")
        return v
    if hint is bool:
        if not isinstance(v, bool):
            raise PolicyParamError(f"{key} must be true or false, got {v!r}")
    elif hint is int:
        try:
            return integral(key, v, minimum=None)
        except ValueError as e:
            raise PolicyParamError(str(e)) from None
    elif hint is float:
        if not is_number(v) or math.isnan(v):
            raise PolicyParamError(f"{key} must be a number, got {v!r}")
        return float(v)
    elif hint is str and not isinstance(v, str):
        raise PolicyParamError(f"{key} must be a string, got {v!r}")
    return v


def make_params(cls: type[Policy], params: Mapping[str, Any] | None) -> Any:
    """The policy's Params from configured values; a one-line error names `scheduler.params.<field>`."""
    params = dict(params or {})
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise UnknownPolicyError(
            f"scheduler '{cls.name}': unknown parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(fields)) or '(none)'}"
        )
    try:
        hints = typing.get_type_hints(cls.Params)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no type checks
        hints = {}
    where = f" (scheduler '{cls.name}')"
    try:
        values = {k: _check_type(f"scheduler.params.{k}", hints.get(k), v) for k, v in params.items()}
    except PolicyParamError as e:
        raise PolicyParamError(f"{e}{where}") from None
    try:
        return cls.Params(**values)
    except RangeError as e:
        field = getattr(e, "field", None)
        if field is None:
            raise PolicyParamError(f"scheduler.params: {e}{where}") from None
        raise PolicyParamError(f"scheduler.params.{field} must be {e.rule}, got {e.value!r}{where}") from None
    except (TypeError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PolicyParamError(f"scheduler.params: {msg}{where}") from None


def create_policy(name: str, params: Mapping[str, Any] | None = None) -> Policy:
    cls = policy_class(name)
    return cls(make_params(cls, params))
