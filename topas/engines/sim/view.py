"""The waiting queue as a policy sees it: SGLang's matching of waiting requests (the engine's `SimEngine.view`
builds the rest of the `SchedulerView`).

Waiting requests are matched the way SGLang 0.5.23's `SchedulePolicy.calc_priority`
matches them (`managers/schedule_policy.py` `_compute_prefix_matches` ->
`mem_cache/common.py` `match_kv_cache`): the *whole* token sequence (prompt plus any
output kept across a retraction), not capped at length - 1. So `cached_tokens` is
SGLang's `req.prefix_len` (device match) and `host_cached_tokens` its
`req.host_hit_length` (the host-tier extension, HiCache); the length - 1 cap
(`Req._compute_max_prefix_len`) applies only to what SGLang sorts LPM by
(`num_matched_prefix_tokens`) and to admission, which matches again with the cap
(`Req.init_next_round_input`; the simulator's `admission.py`). `cached_nodes` carries the
matched device path's sibling order (`RadixCache.path_orders`) for SGLang's
dfs-weight tie order.

Matching refreshes LRU times (`touch_waiting_prefixes`) as SGLang's `calc_priority`
does, on SGLang's waiting queue: sorted in place at every pass and appended to, so before
a pass it is the previous decision's order followed by the new requests
(`sglang_queue_order`). A policy that declares `sglang_matches_waiting(n)` true (SGLang's
cache-aware `lpm` / `dfs-weight` paths) has the whole queue matched head first, as
`_compute_prefix_matches` does. For the others SGLang runs `_touch_waiting_prefixes`: the
first 128 requests (`WAITING_QUEUE_PREFIX_MATCH_MAX`) are matched tail first, so the head
ends up most recently used; the rest are read without touching (as the plugin's cache
probe does). Simplification: SGLang refreshes so every 32nd pass
(`WAITING_PREFIX_REFRESH_INTERVAL`), the simulator at every decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from topas.engines.sim.entities import SimRequest
from topas.engines.sim.radix import RadixCache
from topas.policy import RequestInfo


def sglang_queue_order(waiting: Sequence[SimRequest], previous: Iterable[str]) -> list[SimRequest]:
    """SGLang's waiting queue: sorted in place at every pass and appended to on arrival, so
    before a sort it is the previous order (less the admitted) followed by the new requests."""
    by_rid = {r.rid: r for r in waiting}
    out = [by_rid.pop(rid) for rid in previous if rid in by_rid]
    out.extend(r for r in waiting if r.rid in by_rid)
    return out


WAITING_QUEUE_PREFIX_MATCH_MAX = 128  # SGLang: requests `_touch_waiting_prefixes` refreshes


def match_waiting(cache: RadixCache, queue: Sequence[SimRequest], touch: bool, split: bool = True) -> dict[str, RequestInfo]:
    """RequestInfo of each request of `queue`, matching them in that order (SGLang's full-sequence match)."""
    matches = [(r, cache.match(r.fill_runs(), touch=touch, split=split)) for r in queue]
    # the paths after all matches: a later match may split a node above an earlier one's end
    # (SGLang's `req.last_node` is the same node object, whose path has grown)
    return {r.rid: r.info(m.device_tokens, m.host_tokens, cache.path_orders(m.device_node)) for r, m in matches}


def waiting_infos(
    cache: RadixCache, waiting: Sequence[SimRequest], policy: object, previous: Iterable[str], touch: bool
) -> tuple[RequestInfo, ...]:
    """RequestInfo of the waiting requests (entry order), matched in SGLang's order for
    `policy`; `previous`: the admission order of the policy's last decision."""
    queue = sglang_queue_order(waiting, previous)
    in_order = getattr(policy, "sglang_matches_waiting", None)
    if in_order is not None and in_order(len(waiting)):
        infos = match_waiting(cache, queue, touch)
    else:
        head = queue[:WAITING_QUEUE_PREFIX_MATCH_MAX]
        infos = match_waiting(cache, head[::-1], touch)  # the head ends up most recently used
        infos.update(match_waiting(cache, queue[len(head):], touch=False, split=False))
    return tuple(infos[r.rid] for r in waiting)
