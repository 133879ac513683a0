"""Applying a policy's prefix-residency decision to the simulated cache.

Pinning locks the agent-prefix node (SGLang `inc_lock_ref`), so LRU cannot evict it
and its tokens no longer count as evictable in admission; a pinned prefix that sits
on the host tier is loaded back (prefetch), one absent from both tiers is pinned as
soon as a call of that agent has prefilled it. Offload / drop evict the agent's
unlocked subtree to the host tier / entirely.
"""

from __future__ import annotations

from collections.abc import Mapping

from topas.engines.sim.admission import KVPool
from topas.engines.sim.config import SimEngineConfig
from topas.engines.sim.radix import Node, RadixCache
from topas.policy import Decision, PrefixState
from topas.workflow import Agent, prefix_segment_id


class PrefixResidency:
    def __init__(self, cache: RadixCache, pool: KVPool, agents: Mapping[str, Agent]) -> None:
        self.cache = cache
        self.pool = pool
        self.agents = dict(agents)
        self.desired: frozenset[str] = frozenset()
        self.pinned: dict[str, Node] = {}

    def prefix_node(self, agent: str) -> Node | None:
        """The node ending exactly at the agent prefix (splitting an edge if needed)."""
        a = self.agents[agent]
        if self.cache.child_of_root(prefix_segment_id(agent)) is None:
            return None
        m = self.cache.match([(prefix_segment_id(agent), 0, a.prefix_tokens)], touch=False)
        if m.device_tokens + m.host_tokens < a.prefix_tokens:
            return None
        return m.host_node

    def apply(self, d: Decision, cfg: SimEngineConfig) -> float:
        """Apply pins / offloads / drops; return the transfer seconds of any prefetch."""
        self.desired = d.pin if d.pin is not None else frozenset()
        for agent in [a for a in self.pinned if a not in self.desired]:
            self.cache.unlock(self.pinned.pop(agent))
        for agent, keep_host in [(a, False) for a in sorted(d.drop)] + [(a, True) for a in sorted(d.offload)]:
            node = self.prefix_node(agent)
            if node is not None:
                self.cache.evict_subtree(node, keep_host=keep_host)
        loaded = 0
        for agent in sorted(self.desired - self.pinned.keys()):
            loaded += self._pin(agent)
        return cfg.transfer_time(loaded)

    def _pin(self, agent: str) -> int:
        node = self.prefix_node(agent)
        if node is None:
            return 0
        loaded = 0
        if not node.on_device:
            self.cache.lock(node)  # hold the host path while making room
            ok = self.pool.make_room(self.agents[agent].prefix_tokens)
            self.cache.unlock(node)
            if not ok:
                return 0
            loaded = self.cache.load_back(node)
        self.cache.lock(node)
        self.pinned[agent] = node
        return loaded

    def on_insert(self, agent: str) -> None:
        if agent in self.desired and agent not in self.pinned:
            self._pin(agent)

    def state(self, agent: str, in_use: bool) -> PrefixState:
        a = self.agents[agent]
        node = self.prefix_node(agent)
        dev = a.prefix_tokens if node is not None and node.on_device else 0
        host = a.prefix_tokens if node is not None and node.on_host else 0
        return PrefixState(agent, a.prefix_tokens, dev, host, agent in self.pinned, in_use)

    def resident_count(self) -> int:
        n = 0
        for agent in self.agents:
            node = self.cache.child_of_root(prefix_segment_id(agent))
            if node is not None and node.on_device:
                n += 1
        return n
