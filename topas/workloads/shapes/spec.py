"""A sampled workflow shape: its stages, agents, prefix sizes and call-length distributions.

A shape is a pure function of its id (`shape_spec`): the id seeds one random stream that picks
the structure's parameters (structures.py), the total size of the agents' prefixes as a share of
a reference KV pool (log-uniform from 5% to 130%, split over the agents at random), and for each
agent one measured MetaGPT call kind whose fresh-input and output length distributions its calls
draw from (`CALL_KINDS`: the SOP actions and the TL command / member turns of the calibration data).

Every call must fit the pool with room to spare, so a shape whose largest call (its prefix, its
history and fresh input and output at their maxima) would exceed `CALL_SHARE` of the pool has all
its length distributions scaled down by one factor (`length_scale`, recorded in the description):
the measured shapes of the distributions are kept, their sizes shrink. A wide fan-out's reducer,
which reads every branch's output, is the usual case.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from topas.workloads import metagpt
from topas.workloads.sampling import MinMedMax
from topas.workloads.shapes.structures import STRUCTURES, StageSpec

FAMILY_VERSION = 1  # part of every shape's seed: a change to the generator gets new shapes, never altered ones
REFERENCE_POOL = 22_035  # tokens: the default KV pool (Qwen2.5-32B on A100-80GB, SGLang 0.5.23 sizing)
PREFIX_SHARE = (0.05, 1.3)  # total prefix tokens / pool, log-uniform
MAX_PREFIX_SHARE = 0.45  # one agent's prefix at most this share of the pool
MIN_PREFIX = 32  # tokens
CALL_SHARE = 0.7  # a call's prompt + output at their maxima stay below this share of the pool


@lru_cache(maxsize=1)
def call_kinds() -> dict[str, tuple[MinMedMax, MinMedMax]]:
    """Measured call kinds: name -> (fresh input, output) token distributions (docs/workloads.md)."""
    sop, tl = metagpt.sop(), metagpt.tl()
    kinds = {f"sop:{a}": (sop.fresh[a], sop.output[a]) for a in sorted(sop.fresh)}
    lead = [t for s in tl.stages if s.agent == "TeamLeader" for t in s.turns]
    member = [t for s in tl.stages if s.agent != "TeamLeader" for t in s.turns]
    for name, turns in (("tl:lead_turn", lead), ("tl:member_turn", member)):
        kinds[name] = (MinMedMax.of(t.fresh for t in turns), MinMedMax.of(t.output for t in turns))
    return kinds


@dataclass(frozen=True)
class AgentSpec:
    name: str
    prefix_tokens: int
    kind: str  # the measured call kind its lengths follow (call_kinds)
    fresh: MinMedMax
    output: MinMedMax


@dataclass(frozen=True)
class ShapeSpec:
    id: str
    structure: str
    features: Mapping[str, Any]
    agents: Mapping[str, AgentSpec]
    stages: tuple[StageSpec, ...]
    pool_tokens: int
    length_scale: float = 1.0

    @property
    def prefix_share(self) -> float:
        return sum(a.prefix_tokens for a in self.agents.values()) / self.pool_tokens

    def description(self) -> str:
        """One line, e.g. 'fanout: split -> 16 x one agent -> reduce; 3 agents, prefixes 40% of pool'."""
        f = self.features
        head = {
            "chain": lambda: f"chain, {f['history']} history{', agents take turns' if f['agents'] < f['calls'] else ''}",
            "fanout": lambda: (f"fan-out {'split -> ' if f['split'] else ''}{f['width']} x "
                               f"{'one agent' if f['branch_agents'] == 'one' else 'distinct agents'}"
                               f"{' -> reduce' if f['join'] else ' (no join)'}"),
            "pipeline": lambda: f"pipeline, stage widths {'-'.join(map(str, f['widths']))}",
            "review_loop": lambda: f"review loop, {f['rounds']} round(s){' after a plan' if f['plan'] else ''}",
            "star": lambda: f"manager star, {f['workers']} workers (turns {'-'.join(map(str, f['turns']))})",
            "group_chat": lambda: "group chat, shared transcript",
        }[self.structure]()
        scale = f", lengths x{self.length_scale:.2f}" if self.length_scale < 1 else ""
        return (f"{head}; {len(self.stages)} calls, {len(self.agents)} agents, "
                f"prefixes {100 * self.prefix_share:.0f}% of pool{scale}")


def _rng(shape_id: str) -> np.random.Generator:
    digest = hashlib.sha256(f"topas-shapes-v{FAMILY_VERSION}:{shape_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _prefixes(rng: np.random.Generator, names: list[str], pool: int) -> dict[str, int]:
    lo, hi = PREFIX_SHARE
    total = np.exp(rng.uniform(np.log(lo), np.log(hi))) * pool
    weights = rng.dirichlet(np.ones(len(names)))
    return {a: int(np.clip(round(total * w), MIN_PREFIX, MAX_PREFIX_SHARE * pool)) for a, w in zip(names, weights)}


def _scaled(d: MinMedMax, s: float) -> MinMedMax:
    return d if s >= 1 else MinMedMax(max(1.0, d.min * s), max(1.0, d.median * s), max(1.0, d.max * s))


def _length_scale(stages: tuple[StageSpec, ...], agents: Mapping[str, AgentSpec], pool: int) -> float:
    """The largest factor <= 1 by which every length distribution must shrink so that each call's
    prompt + output at their maxima stays within CALL_SHARE of the pool (prefixes are not scaled)."""
    agent_of = {s.id: s.agent for s in stages}
    scale = 1.0
    for s in stages:
        a = agents[s.agent]
        seg = sum(agents[agent_of[n]].fresh.max if kind == "in" else agents[agent_of[n]].output.max for kind, n in s.history)
        lengths = seg + a.fresh.max + a.output.max
        room = CALL_SHARE * pool - a.prefix_tokens
        if lengths > room:
            scale = min(scale, room / lengths)
    return scale


def shape_spec(shape_id: str, pool_tokens: int = REFERENCE_POOL) -> ShapeSpec:
    """The shape of an id: `d<k>` (design sample) or `e<k>` (evaluation sample), k >= 0 (catalog.py).
    The structure is STRUCTURES in turn by k, so any run of consecutive ids covers them evenly."""
    from topas.workloads.shapes.catalog import parse_id

    _, k = parse_id(shape_id)
    rng = _rng(shape_id)
    structure = list(STRUCTURES)[k % len(STRUCTURES)]
    lay = STRUCTURES[structure](rng)
    names = list(dict.fromkeys(s.agent for s in lay.stages))
    prefix = _prefixes(rng, names, pool_tokens)
    kinds = call_kinds()
    kind_names = sorted(kinds)
    agents = {}
    for a in names:
        kind = kind_names[int(rng.integers(len(kind_names)))]
        agents[a] = AgentSpec(a, prefix[a], kind, *kinds[kind])
    stages = tuple(lay.stages)
    scale = _length_scale(stages, agents, pool_tokens)
    if scale < 1:
        agents = {a: AgentSpec(s.name, s.prefix_tokens, s.kind, _scaled(s.fresh, scale), _scaled(s.output, scale))
                  for a, s in agents.items()}
    return ShapeSpec(shape_id, structure, dict(lay.features), agents, stages, pool_tokens, scale)
