"""Small checks of configured values, each failing with a one-line ValueError that names the key.

    integral("workload.params.input_tokens", 512.0)        # -> 512 (an integral float is a count too)
    integral("workload.params.input_tokens", 512.5)        # ValueError: ... must be a positive integer, got 512.5
    number("backend.decision_cost_s", -1, ">= 0")          # ValueError: backend.decision_cost_s must be >= 0, got -1

A rule is "> a", ">= a", "< a", "<= a" or an interval "in [a, b]" / "in (a, b]" / "in [a, b)" / "in (a, b)".
A value must be finite unless its rule names `inf` ("in [0, inf]"). A policy's parameters are checked with these rules
by `topas.policy.check_ranges` (in its Params dataclass).
Nothing here imports the rest of the package.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

_CMP = re.compile(r"^(>=|<=|>|<)\s*(\S+)$")
_INTERVAL = re.compile(r"^in\s*([\[(])\s*([^,]+),\s*([^\])]+)([\])])$")


class RangeError(ValueError):
    """A value outside its rule; `key`, `rule` and `value` let a caller re-name the key."""

    def __init__(self, key: str, rule: str, value: Any) -> None:
        self.key, self.rule, self.value = key, rule, value
        super().__init__(f"{key} must be {rule}, got {value!r}")


def is_number(v: Any) -> bool:
    """A real number (not a bool, not a string)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def satisfies(v: float, rule: str) -> bool:
    """True when `v` obeys `rule` (NaN obeys none; an infinity only a rule that names `inf`)."""
    if math.isinf(v) and "inf" not in rule:
        return False
    m = _CMP.match(rule.strip())
    if m:
        op, bound = m.group(1), float(m.group(2))
        return {">": v > bound, ">=": v >= bound, "<": v < bound, "<=": v <= bound}[op]
    m = _INTERVAL.match(rule.strip())
    if m:
        lo, hi = float(m.group(2)), float(m.group(3))
        above = v >= lo if m.group(1) == "[" else v > lo
        below = v <= hi if m.group(4) == "]" else v < hi
        return above and below
    raise ValueError(f"unknown rule {rule!r}")  # a programming error, not a user's


def check_range(key: str, v: Any, rule: str) -> None:
    if not satisfies(v, rule):
        raise RangeError(key, rule, v)


def _integer_words(minimum: int | None) -> str:
    if minimum == 1:
        return "a positive integer"
    if minimum == 0:
        return "a non-negative integer"
    return "an integer" if minimum is None else f"an integer >= {minimum}"


def integral(key: str, v: Any, minimum: int | None = 1) -> int:
    """`v` as an int: an int, or an integral float (512.0 -> 512); at least `minimum` (None: any)."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        n = int(v)
    elif is_number(v) and math.isfinite(v) and float(v).is_integer():
        n = int(v)
    else:
        raise ValueError(f"{key} must be {_integer_words(minimum)}, got {v!r}")
    if minimum is not None and n < minimum:
        raise ValueError(f"{key} must be {_integer_words(minimum)}, got {v!r}")
    return n


def number(key: str, v: Any, rule: str | None = None, finite: bool = True) -> float:
    """`v` as a float: a number (finite unless `finite` is false; never NaN) obeying `rule`."""
    if not is_number(v) or math.isnan(v) or (finite and not math.isfinite(v)):
        raise ValueError(f"{key} must be a {'finite ' if finite else ''}number, got {v!r}")
    if rule is not None:
        check_range(key, v, rule)
    return float(v)
