"""A policy's parameter ranges, declared once in its frozen `Params` dataclass:

    def __post_init__(self) -> None:
        check_ranges(self, M=">= 0", K="> 0")

A policy imports only `topas.policy` and `topas.workflow` (tests/test_imports.py), so this is where it finds
the rule checker; the rules themselves are topas.checks's."""

from __future__ import annotations

from typing import Any

from topas.checks import RangeError, is_number, satisfies


def check_ranges(obj: Any, **rules: str) -> None:
    """In a (frozen) dataclass's `__post_init__`, the one place its fields' ranges are declared:
    each named field obeys its rule (None passes: an optional field left unset); a RangeError
    names `<Class>.<field>` (the policy registry re-names it `scheduler.params.<field>`)."""
    owner = type(obj).__qualname__
    for name, rule in rules.items():
        v = getattr(obj, name)
        if v is not None and (not is_number(v) or not satisfies(v, rule)):
            err = RangeError(f"{owner}.{name}", rule, v)
            err.field = name  # type: ignore[attr-defined]
            raise err
