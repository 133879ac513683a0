"""Orderings of TOPAS's admission list (docs/topas.md, "Admission list")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def group_by_agent(rids: Sequence[str], agent_of: Mapping[str, str]) -> list[str]:
    """Each agent's calls pulled up behind its first (highest-ranked) call, otherwise in list order:
    calls that share a prefix are admitted together (as Parrot's ctx_group groups requests sharing
    a prompt prefix)."""
    by_agent: dict[str, list[str]] = {}
    for rid in rids:
        by_agent.setdefault(agent_of[rid], []).append(rid)
    return [rid for group in by_agent.values() for rid in group]
