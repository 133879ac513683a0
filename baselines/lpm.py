"""LPM: SGLang's `lpm` schedule policy, with SGLang 0.5.23's defaults.

Source: `sglang/srt/managers/schedule_policy.py`, `SchedulePolicy.calc_priority`:

- The waiting queue is sorted by `num_matched_prefix_tokens`, longest first
  (`_sort_by_longest_prefix`; a stable sort). `mem_cache/common.py` `match_kv_cache` sets
  it to min(device match + host-tier match, length - 1): with HiCache on, host hits count
  (`host_hit_length`, from the unified tree's `FullComponent.finalize_match_result_in_tree_core`),
  and the whole sequence (prompt + kept output) is matched but the key is capped at its
  length - 1 (`Req._compute_max_prefix_len`). The view's `cached_tokens` /
  `host_cached_tokens` are the uncapped device / host matches (`req.prefix_len`,
  `req.host_hit_length`).
- In-batch prefix caching (`_compute_prefix_matches`): walking the queue, a request whose
  device match (`req.prefix_len`, uncapped) is at most 32 tokens is matched against the
  requests of this walk already inserted into a scratch tree; if it shares >= 32 tokens
  with one of them it is deprioritized (sorted last), else inserted; so one request warms
  the shared prefix for the others.
- With more than 128 waiting requests (`WAITING_QUEUE_PREFIX_MATCH_MAX`, hard-coded)
  SGLang switches to FCFS for the pass (`_determine_active_policy`): no sort at all.
- SGLang's waiting queue persists between passes: it is sorted in place, admitted requests
  are removed and new ones appended (`Scheduler._add_request_to_queue`, retracted ones
  too). So ties, the in-batch walk and the FCFS fallback all see the previous pass's order
  followed by the new requests, not arrival order; this policy keeps that order
  (`sglang_queue_order`).
- The admission walk stops at the first request that does not fit (SGLang).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from topas.policy import Decision, Policy, RequestInfo, SchedulerView, check_ranges, register_policy


def sglang_queue_order(waiting: Iterable[RequestInfo], previous: Iterable[str]) -> list[RequestInfo]:
    """SGLang's waiting queue before this pass's sort: the requests still waiting in the
    previous pass's order, then the others (new or retracted) in the view's (entry) order."""
    by_rid = {r.rid: r for r in waiting}
    out = [by_rid.pop(rid) for rid in previous if rid in by_rid]
    out.extend(r for r in by_rid.values())
    return out


class _SegmentTrie:
    """The prompts of the waiting requests inserted so far (SGLang's scratch
    `waiting_queue_radix_tree`), token-exact: equal segment ids at equal positions are
    equal tokens, so two prompts share min(n, m) tokens of a segment they both hold (n and
    m tokens of it) and continue together only if n == m."""

    def __init__(self) -> None:
        self.root: dict[str, dict[int, dict]] = {}

    def match(self, segments: tuple[tuple[str, int], ...]) -> int:
        node, n = self.root, 0
        for sid, tokens in segments:
            lengths = node.get(sid)
            if not lengths:
                break
            if tokens in lengths:
                n += tokens
                node = lengths[tokens]
                continue
            n += max(min(m, tokens) for m in lengths)
            break
        return n

    def insert(self, segments: tuple[tuple[str, int], ...]) -> None:
        node = self.root
        for sid, tokens in segments:
            node = node.setdefault(sid, {}).setdefault(tokens, {})


def _sequence(r: RequestInfo) -> tuple[tuple[str, int], ...]:
    """The token sequence SGLang matches for a waiting request: prompt, then kept output."""
    if r.generated_tokens:
        return r.segments + ((f"{r.rid}:generated", r.generated_tokens),)
    return r.segments


def in_batch_deprioritized(waiting: Iterable[RequestInfo], check: int, deprioritize: int) -> set[str]:
    trie = _SegmentTrie()
    out: set[str] = set()
    for r in waiting:
        if r.cached_tokens <= check:
            seq = _sequence(r)
            if trie.match(seq) >= deprioritize:
                out.add(r.rid)
            else:
                trie.insert(seq)
    return out


def lpm_key(r: RequestInfo) -> int:
    """SGLang's `num_matched_prefix_tokens`: device + host match, at most the sequence length - 1."""
    return min(r.cached_tokens + r.host_cached_tokens, max(r.prompt_tokens + r.generated_tokens - 1, 0))


def sort_by_longest_prefix(queue: list[RequestInfo], p: LPM.Params) -> tuple[str, ...]:
    """`queue` in SGLang's pre-sort order (see `sglang_queue_order`)."""
    if len(queue) > p.fcfs_above_waiting:
        return tuple(r.rid for r in queue)
    depri = in_batch_deprioritized(queue, p.in_batch_check_threshold, p.in_batch_deprioritize_threshold)
    ordered = sorted(queue, key=lambda r: float("inf") if r.rid in depri else -lpm_key(r))
    return tuple(r.rid for r in ordered)


@register_policy("lpm")
class LPM(Policy):
    @dataclass(frozen=True)
    class Params:
        fcfs_above_waiting: int = 128  # WAITING_QUEUE_PREFIX_MATCH_MAX (a constant in SGLang)
        in_batch_check_threshold: int = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
        in_batch_deprioritize_threshold: int = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD

        def __post_init__(self) -> None:
            check_ranges(self, fcfs_above_waiting=">= 0", in_batch_check_threshold=">= 0",
                         in_batch_deprioritize_threshold=">= 0")

    def __init__(self, params=None) -> None:
        super().__init__(params)
        self._queue: tuple[str, ...] = ()  # SGLang's waiting-queue order after the last pass

    def sglang_matches_waiting(self, n_waiting: int) -> bool:
        """Whether SGLang matches the waiting queue in queue order at this pass (cache-aware
        path); above the FCFS threshold it does not (the simulator's view reads this)."""
        return n_waiting <= self.params.fcfs_above_waiting

    def schedule(self, view: SchedulerView) -> Decision:
        self._queue = sort_by_longest_prefix(sglang_queue_order(view.waiting, self._queue), self.params)
        return Decision(admit=self._queue, stop_at_first_misfit=True)
