"""LPM: SGLang's `lpm` schedule policy (managers/schedule_policy.py, sglang 0.5.23).

- Waiting requests are sorted by the length of their cached prefix on device,
  longest first (`_sort_by_longest_prefix`; Python's stable sort keeps entry order on ties).
- In-batch prefix caching (`_compute_prefix_matches`): a request whose cached prefix
  is at most 32 tokens is matched against the waiting requests seen before it; if it
  shares >= 32 tokens with one of them it is deprioritized (sorted last), so one
  request warms the shared prefix for the others.
- With more than 128 waiting requests SGLang skips matching and falls back to FCFS.
- The admission walk stops at the first request that does not fit (SGLang).
"""

from __future__ import annotations

from dataclasses import dataclass

from baselines.fcfs import sort_by_fcfs
from topas.policy import Decision, Policy, RequestInfo, SchedulerView, register_policy


class _SegmentTrie:
    """Prefixes of the waiting requests already examined (SGLang's simulated waiting-queue tree)."""

    def __init__(self) -> None:
        self.root: dict = {}

    def match(self, segments: tuple[tuple[str, int], ...]) -> int:
        node, n = self.root, 0
        for sid, tokens in segments:
            if sid not in node:
                break
            node = node[sid]
            n += tokens
        return n

    def insert(self, segments: tuple[tuple[str, int], ...]) -> None:
        node = self.root
        for sid, _ in segments:
            node = node.setdefault(sid, {})


def in_batch_deprioritized(waiting: tuple[RequestInfo, ...], check: int, deprioritize: int) -> set[str]:
    trie = _SegmentTrie()
    out: set[str] = set()
    for r in waiting:
        if r.cached_tokens <= check:
            if trie.match(r.segments) >= deprioritize:
                out.add(r.rid)
            else:
                trie.insert(r.segments)
    return out


def sort_by_longest_prefix(view: SchedulerView, p: LPM.Params) -> tuple[str, ...]:
    if len(view.waiting) > p.fcfs_above_waiting:
        return sort_by_fcfs(view)
    depri = in_batch_deprioritized(view.waiting, p.in_batch_check_threshold, p.in_batch_deprioritize_threshold)
    ordered = sorted(view.waiting, key=lambda r: float("inf") if r.rid in depri else -r.cached_tokens)
    return tuple(r.rid for r in ordered)


@register_policy("lpm")
class LPM(Policy):
    @dataclass(frozen=True)
    class Params:
        fcfs_above_waiting: int = 128  # WAITING_QUEUE_PREFIX_MATCH_MAX
        in_batch_check_threshold: int = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
        in_batch_deprioritize_threshold: int = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD

    def schedule(self, view: SchedulerView) -> Decision:
        return Decision(admit=sort_by_longest_prefix(view, self.params), stop_at_first_misfit=True)
