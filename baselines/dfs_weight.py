"""DFS-weight: SGLang's `dfs-weight` schedule policy (sglang 0.5.23).

Source: `managers/schedule_policy.py` (`CacheAwarePolicy.DFS_WEIGHT`,
`SchedulePolicy._sort_by_dfs_weight`) and `mem_cache/base_prefix_cache.py`
(`_dfs_weight_order`; the same algorithm as the older `_calc_weight` +
`_get_dfs_priority` of sglang <= 0.4):

1. every waiting request is attached to `req.last_node`, the deepest node of the
   *device* radix tree its whole sequence matches (`match_kv_cache`: prompt plus kept
   output, not capped at length - 1; host hits do not count). A fully cached prompt is
   attached to the node its prompt ends at, beside the requests that extend it;
2. the weight of a node = the number of waiting requests attached to it or to any
   node below it (post-order sum);
3. the tree is walked depth first from the root, children in decreasing weight
   (a stable sort of `node.children.values()`: ties keep the children's dict order, the
   order they were inserted into the cache tree), and a node's own requests are emitted
   *after* its children's subtrees (post-order), in waiting-queue order.

So requests sharing the heaviest cached prefix run together, and requests with no
device hit (attached to the root) come last. Unlike `lpm`, SGLang never falls back to
FCFS for long queues here (`_determine_active_policy` only does so for lpm/hrrn), and
the in-batch deprioritization it computes is not used by this sort. The admission walk
stops at the first request that does not fit (`_get_new_batch_prefill_raw`).

"Waiting-queue order" is SGLang's persistent queue: sorted in place at every pass, new
and retracted requests appended (see `baselines/lpm.py`); this policy keeps it.

The tree: when the engine exposes its cache tree (`RequestInfo.cached_nodes`: one
sibling-order key per node of the request's device path, as the simulator does), it is
rebuilt node for node and siblings tie in the engine's order, as in SGLang. Otherwise it
is rebuilt from the view: a request's path is its prompt `segments` truncated to its
`cached_tokens`, cut at every partial-segment boundary any request ends on, so two
requests share a node exactly when their cached prompts share those tokens (equal segment
ids = equal tokens); ties then go by the position of the first waiting request under
each child. Nodes of the real tree that hold no waiting request have weight 0 and emit
nothing, so leaving them out changes no order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from baselines.lpm import sglang_queue_order
from topas.policy import Decision, Policy, RequestInfo, SchedulerView, register_policy

Piece = tuple[str, int, int]  # (segment id, start, end) within the segment


def cached_path(r: RequestInfo) -> tuple[tuple[str, int], ...]:
    """The request's device-matched sequence as (segment id, tokens) runs, the last possibly partial."""
    out, left = [], r.cached_tokens
    segments = r.segments + (((f"{r.rid}:generated", r.generated_tokens),) if r.generated_tokens else ())
    for sid, n in segments:
        if left <= 0:
            break
        out.append((sid, min(n, left)))
        left -= n
    return tuple(out)


def _pieces(path: tuple[tuple[str, int], ...], cuts: dict[str, list[int]], full: dict[str, int]) -> list[Piece]:
    """Split every segment of a path at the global cut points of that segment id."""
    out: list[Piece] = []
    for sid, n in path:
        start = 0
        for c in cuts.get(sid, ()):
            if start < c <= n and c < full.get(sid, n):
                out.append((sid, start, c))
                start = c
        if start < n:
            out.append((sid, start, n))
    return out


class _Node:
    __slots__ = ("children", "reqs", "weight", "first")

    def __init__(self) -> None:
        self.children: dict = {}
        self.reqs: list[int] = []  # waiting-queue positions attached here
        self.weight = 0
        self.first = 1 << 62  # sibling tie-break: engine order key, else earliest queue position


def _engine_tree(waiting: Sequence[RequestInfo]) -> _Node:
    """The engine's device tree restricted to the waiting requests' paths (`cached_nodes`)."""
    root = _Node()
    for i, r in enumerate(waiting):
        node = root
        for key in r.cached_nodes:
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node()
                child.first = key
            node = child
        node.reqs.append(i)
    return root


def _segment_tree(waiting: Sequence[RequestInfo]) -> _Node:
    """The tree rebuilt from segments (engines that do not expose theirs)."""
    paths = [cached_path(r) for r in waiting]
    full: dict[str, int] = {}
    for r in waiting:
        for sid, n in r.segments:
            full[sid] = n
    cuts: dict[str, set[int]] = defaultdict(set)
    for p in paths:
        if p:
            sid, n = p[-1]
            if n < full.get(sid, n):
                cuts[sid].add(n)
    sorted_cuts = {sid: sorted(cs) for sid, cs in cuts.items()}
    root = _Node()
    for i, p in enumerate(paths):
        node = root
        node.first = min(node.first, i)
        for piece in _pieces(p, sorted_cuts, full):
            node = node.children.setdefault(piece, _Node())
            node.first = min(node.first, i)
        node.reqs.append(i)
    return root


def dfs_weight_order(waiting: Sequence[RequestInfo]) -> list[int]:
    """Indices of `waiting` (in SGLang's queue order) in SGLang's dfs-weight order."""
    exposed = all(r.cached_nodes or not r.cached_tokens for r in waiting)
    root = _engine_tree(waiting) if exposed else _segment_tree(waiting)

    # weights, post-order (iterative: prompts can be deep)
    stack: list[tuple[_Node, bool]] = [(root, False)]
    while stack:
        node, visited = stack.pop()
        if visited:
            node.weight = len(node.reqs) + sum(c.weight for c in node.children.values())
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in node.children.values())

    order: list[int] = []
    stack = [(root, False)]
    while stack:
        node, visited = stack.pop()
        if visited:
            order.extend(node.reqs)
            continue
        stack.append((node, True))
        kids = sorted(node.children.values(), key=lambda c: (-c.weight, c.first))
        stack.extend((c, False) for c in reversed(kids))
    return order


def sort_by_dfs_weight(queue: Sequence[RequestInfo]) -> tuple[str, ...]:
    """`queue` in SGLang's pre-sort order (see `sglang_queue_order`)."""
    return tuple(queue[i].rid for i in dfs_weight_order(queue))


@register_policy("dfs_weight")
class DFSWeight(Policy):
    def __init__(self, params=None) -> None:
        super().__init__(params)
        self._queue: tuple[str, ...] = ()  # SGLang's waiting-queue order after the last pass

    def sglang_matches_waiting(self, n_waiting: int) -> bool:
        """SGLang matches the waiting queue in queue order at every pass (cache-aware path)."""
        return True

    def schedule(self, view: SchedulerView) -> Decision:
        self._queue = sort_by_dfs_weight(sglang_queue_order(view.waiting, self._queue))
        return Decision(admit=self._queue, stop_at_first_misfit=True)
