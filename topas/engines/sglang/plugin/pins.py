"""The agent prefixes the plugin keeps pinned on device (lock refs on SGLang's radix tree)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from topas.engines.sglang.plugin.adapter import pin_changes
from topas.engines.sglang.plugin.cache_probe import CacheProbe, PinHandle
from topas.policy.decision import Decision


class PinSet:
    """Pins held by the plugin, one per agent; iterating yields the pinned agents.

    `apply(decision, prefix_ids)` moves the pins to what the decision asks and returns
    what could not be applied: `pin_not_resident` (a prefix not fully on device yet:
    retried at the next decision) and `offload_drop_left_to_lru` (sglang 0.5.23 has no
    public per-node demote/drop call: the pin is released and SGLang's LRU evicts)."""

    def __init__(self, probe: CacheProbe, on_lost: Callable[[str], None] | None = None) -> None:
        self.probe = probe
        self.on_lost = on_lost
        self._held: dict[str, PinHandle] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._held))

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, agent: object) -> bool:
        return agent in self._held

    def apply(self, decision: Decision, prefix_ids: Mapping[str, Any]) -> dict[str, list[str]]:
        # A held pin keeps its prefix on device; if the prefix is gone the tree was reset
        # (/flush_cache): the lock died with it, forget the handle without unlocking.
        for agent in list(self._held):
            ids = prefix_ids.get(agent)
            if ids is None or self.probe.device_tokens(ids) < self._held[agent].tokens:
                del self._held[agent]
                if self.on_lost is not None:
                    self.on_lost(agent)
        to_pin, to_unpin = pin_changes(self._held, decision.pin, decision.offload, decision.drop)
        for agent in sorted(to_unpin):
            self.probe.unpin(self._held.pop(agent))
        missing = []
        for agent in sorted(to_pin):
            ids = prefix_ids.get(agent)
            handle = self.probe.pin(ids) if ids is not None else None
            if handle is None:
                missing.append(agent)
            else:
                self._held[agent] = handle
        not_applied: dict[str, list[str]] = {}
        if missing:
            not_applied["pin_not_resident"] = missing
        moved = sorted(decision.offload | decision.drop)
        if moved:
            not_applied["offload_drop_left_to_lru"] = moved
        return not_applied

    def release_all(self) -> None:
        for agent in list(self._held):
            try:
                self.probe.unpin(self._held.pop(agent))
            except Exception:  # noqa: BLE001 - shutting down
                pass
