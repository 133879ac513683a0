"""Radix prefix cache over segment runs, with a host tier (SGLang RadixCache + HiCache).

Keys are token sequences written as *runs* `(segment_id, start, length)`: tokens
`start .. start+length-1` of a segment. Token identity is a function of
(segment id, position) (docs/workflow_model.md), so two runs share tokens exactly
when their segment ids and start positions agree; matching proceeds run by run
instead of token by token, yet is token-exact (nodes split at token offsets).

Semantics mirrored from SGLang 0.5.23 (`mem_cache/radix_cache.py` `RadixCache`, and
`mem_cache/unified_cache/unified_tree_core.py` `UnifiedTreeCore`, the default tree):
- `match` returns the longest cached prefix, splitting the last node at the match end,
  and refreshes the LRU time of the matched path. A node the match (or an insert) ends
  inside is refreshed *whole* before it is split, so the split-off lower half counts as
  just used too (`RadixCache._match_prefix_helper` / `_insert_helper` set
  `child.last_access_time` before `_split_node`; `UnifiedTreeCore._split_node` sets
  `child.last_access_time` itself); the upper half is then the more recent one;
- children keep SGLang's dict order (insertion order; a split node keeps its slot, a
  deleted and re-inserted one goes last); `Node.order` is a key in that order, and
  `path_orders` gives it along a path (for SGLang's dfs-weight tie order);
- `lock`/`unlock` add/remove a reference on a node and all its ancestors; locked
  nodes are not evictable; `evictable_tokens` counts unlocked device tokens;
- eviction removes least-recently-used unlocked device *leaves* (no device child)
  until enough tokens are freed; with a host tier the evicted node keeps a host copy
  (write-back; host LRU makes room), otherwise it is deleted;
- `load_back` brings a host-only path back to the device.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

Run = tuple[str, int, int]  # (segment id, start, length)


class Node:
    __slots__ = ("key", "tokens", "children", "parent", "lock_ref", "last_access", "on_device", "on_host", "uid", "order")

    def __init__(self, key: list[Run], parent: Node | None, uid: int) -> None:
        self.key = key
        self.tokens = sum(r[2] for r in key)
        self.children: dict[tuple[str, int], Node] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = 0
        self.on_device = True
        self.on_host = False
        self.uid = uid
        self.order = uid  # position among its siblings: creation order; a split's upper half inherits it

    def child_key(self) -> tuple[str, int]:
        return self.key[0][0], self.key[0][1]

    def has_device_child(self) -> bool:
        return any(c.on_device for c in self.children.values())


@dataclass(frozen=True, slots=True)
class Match:
    device_tokens: int  # matched tokens resident on device
    host_tokens: int  # further matched tokens only on the host tier
    device_node: Node  # deepest matched device node (root if none)
    host_node: Node  # deepest matched node (== device_node if no host hit)


def runs_of(segments: Sequence[tuple[str, int]]) -> list[Run]:
    """Full-segment runs for a list of (segment id, tokens)."""
    return [(sid, 0, n) for sid, n in segments if n > 0]


def truncate_runs(runs: Sequence[Run], tokens: int) -> list[Run]:
    """The first `tokens` tokens of a run list."""
    out: list[Run] = []
    left = tokens
    for sid, start, n in runs:
        if left <= 0:
            break
        take = min(n, left)
        out.append((sid, start, take))
        left -= take
    return out


def _tail(runs: Sequence[Run], i: int, off: int) -> list[Run]:
    """The runs from position (run i, offset off) on."""
    if off == 0:
        return list(runs[i:])
    sid, start, n = runs[i]
    return [(sid, start + off, n - off)] + list(runs[i + 1 :])


def _advance(runs: Sequence[Run], i: int, off: int, n: int) -> tuple[int, int]:
    """Move position (run i, offset off) forward by n tokens."""
    while n > 0:
        left = runs[i][2] - off
        if n < left:
            return i, off + n
        n -= left
        i, off = i + 1, 0
    return i, off


class RadixCache:
    def __init__(self, kv_pool_tokens: int, host_pool_tokens: int = 0) -> None:
        self._uid = itertools.count()
        self.root = Node([], None, next(self._uid))
        self.root.lock_ref = 1  # never evicted
        self.kv_pool_tokens = kv_pool_tokens
        self.host_pool_tokens = host_pool_tokens
        self.device_tokens = 0  # tree tokens on device
        self.host_tokens = 0
        self.evictable_tokens = 0  # device tokens with lock_ref == 0
        self._clock = 0
        self._lru: list[tuple[int, int, Node]] = []  # lazy heap of device-eviction candidates
        self._host_lru: list[tuple[int, int, Node]] = []
        self.bytes_out_tokens = 0  # device -> host tokens written (offload)
        self.bytes_in_tokens = 0  # host -> device tokens loaded

    # ------------------------------------------------------------------ helpers
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _touch(self, node: Node) -> None:
        node.last_access = self._tick()
        self._push_candidate(node)

    def _push_candidate(self, node: Node) -> None:
        if node.on_device and node.lock_ref == 0 and node is not self.root:
            heapq.heappush(self._lru, (node.last_access, node.uid, node))

    def _is_device_victim(self, entry: tuple[int, int, Node]) -> bool:
        t, _, node = entry
        return (
            node.parent is not None
            and node.on_device
            and node.lock_ref == 0
            and node.last_access == t
            and not node.has_device_child()
        )

    def _split(self, node: Node, at: int) -> Node:
        """Split `node` so that its first `at` tokens form a new parent; return the parent."""
        i, off = _advance(node.key, 0, 0, at)
        upper_key = list(node.key[:i]) + ([(node.key[i][0], node.key[i][1], off)] if off else [])
        lower_key = _tail(node.key, i, off)
        parent = node.parent
        assert parent is not None
        upper = Node(upper_key, parent, next(self._uid))
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        upper.on_device, upper.on_host = node.on_device, node.on_host
        upper.order = node.order  # takes the node's slot in its parent's children (same key)
        parent.children[upper.child_key()] = upper
        node.key = lower_key
        node.tokens -= upper.tokens
        node.parent = upper
        upper.children[node.child_key()] = node
        return upper

    # ------------------------------------------------------------------ queries
    def match(self, runs: Sequence[Run], touch: bool = True, split: bool = True) -> Match:
        """Longest cached prefix of `runs` (device part, then host-only part).
        `split=False` (with `touch=False`) is a read-only walk that leaves the tree as it is;
        a match ending inside a node then reports that node, to be inspected, not locked."""
        assert split or not touch, "a touching match splits (SGLang)"
        node = self.root
        i = off = 0
        dev_tokens = host_tokens = 0
        dev_node = self.root
        on_device_path = True
        while i < len(runs):
            sid, start, _ = runs[i]
            child = node.children.get((sid, start + off))
            if child is None:
                break
            matched = 0
            full = True
            for csid, cstart, cn in child.key:
                if i >= len(runs):
                    full = False
                    break
                qsid, qstart, qn = runs[i]
                if csid != qsid or cstart != qstart + off:
                    full = False
                    break
                common = min(cn, qn - off)
                matched += common
                i, off = _advance(runs, i, off, common)
                if common < cn:
                    full = False
                    break
            if matched == 0:
                break
            if touch:
                self._touch(child)  # the whole node, before a split (SGLang): both halves are refreshed
            if not full and split:
                child = self._split(child, matched)
                if touch:
                    self._touch(child)  # the upper half last: more recent than the lower (SGLang)
            if child.on_device and on_device_path:
                dev_tokens += matched
                dev_node = child
            else:
                on_device_path = False
                if not child.on_host:
                    break
                host_tokens += matched
            node = child
            if not full:
                break
        host_node = node if host_tokens else dev_node
        return Match(dev_tokens, host_tokens, dev_node, host_node)

    def path_orders(self, node: Node) -> tuple[int, ...]:
        """`Node.order` of every node from the root's child down to `node` (() for the root)."""
        out = [n.order for n in self.path(node)]
        out.reverse()
        return tuple(out)

    def path(self, node: Node) -> Iterator[Node]:
        while node is not self.root and node is not None:
            yield node
            node = node.parent  # type: ignore[assignment]

    # ------------------------------------------------------------------ locking
    def lock(self, node: Node) -> None:
        for n in self.path(node):
            if n.lock_ref == 0 and n.on_device:
                self.evictable_tokens -= n.tokens
            n.lock_ref += 1

    def unlock(self, node: Node) -> None:
        for n in self.path(node):
            n.lock_ref -= 1
            assert n.lock_ref >= 0, "unbalanced unlock"
            if n.lock_ref == 0 and n.on_device:
                self.evictable_tokens += n.tokens
                self._push_candidate(n)
            elif n.lock_ref == 0 and n.on_host and not n.children:
                heapq.heappush(self._host_lru, (n.last_access, n.uid, n))

    # ------------------------------------------------------------------ insertion
    def insert(self, runs: Sequence[Run]) -> tuple[Node, int]:
        """Insert a device-resident key. Returns (last node, newly added device tokens).
        Host-only nodes on the path are brought back to the device (their KV was just computed)."""
        total = sum(r[2] for r in runs)
        m = self.match(runs)
        node = m.host_node
        added = 0
        # host-only nodes on the matched path now have device copies again
        for n in self.path(node):
            if n.on_device:
                break
            self._set_device(n, True)
            added += n.tokens
        done = m.device_tokens + m.host_tokens
        if done < total:
            new = Node(_tail(runs, *_advance(runs, 0, 0, done)), node, next(self._uid))
            node.children[new.child_key()] = new
            self.device_tokens += new.tokens
            self.evictable_tokens += new.tokens
            added += new.tokens
            node = new
            self._touch(node)
        return node, added

    def _set_device(self, n: Node, on: bool) -> None:
        if n.on_device == on:
            return
        n.on_device = on
        sign = 1 if on else -1
        self.device_tokens += sign * n.tokens
        if n.lock_ref == 0:
            self.evictable_tokens += sign * n.tokens
        if on:
            self._push_candidate(n)

    # ------------------------------------------------------------------ eviction
    def evict(self, tokens: int) -> int:
        """Free at least `tokens` device tokens by LRU eviction of unlocked leaves (if possible)."""
        freed = 0
        while freed < tokens and self._lru:
            entry = heapq.heappop(self._lru)
            if not self._is_device_victim(entry):
                continue
            node = entry[2]
            freed += self._evict_node(node)
        return freed

    def _evict_node(self, node: Node, keep_host: bool = True) -> int:
        """Evict a device leaf: keep a host copy if possible, else delete it (and its host-only subtree)."""
        parent = node.parent
        assert parent is not None
        tokens = node.tokens
        if keep_host and self.host_pool_tokens > 0 and (node.on_host or self._make_host_room(node.tokens)):
            if not node.on_host:
                node.on_host = True
                self.host_tokens += node.tokens
                self.bytes_out_tokens += node.tokens
                heapq.heappush(self._host_lru, (node.last_access, node.uid, node))
            self._set_device(node, False)
        else:
            self._set_device(node, False)
            self._delete_subtree(node)  # without its tokens the descendants are unreachable
        if parent is not self.root and parent.parent is not None and parent.on_device and not parent.has_device_child():
            self._push_candidate(parent)
        return tokens

    def _delete_subtree(self, node: Node) -> None:
        """Remove a node that is on neither tier, with its (host-only) descendants."""
        assert not node.on_device
        for child in list(node.children.values()):
            self._delete_subtree(child)
        if node.on_host:
            node.on_host = False
            self.host_tokens -= node.tokens
        parent = node.parent
        if parent is not None:
            del parent.children[node.child_key()]
            node.parent = None
            if parent is not self.root and not parent.on_device and not parent.children:
                heapq.heappush(self._host_lru, (parent.last_access, parent.uid, parent))

    def _make_host_room(self, tokens: int) -> bool:
        if tokens > self.host_pool_tokens:
            return False
        while self.host_tokens + tokens > self.host_pool_tokens and self._host_lru:
            _, _, n = heapq.heappop(self._host_lru)
            if n.parent is None or not n.on_host or n.on_device or n.children or n.lock_ref:
                continue  # stale entry, or pinned while a load-back is being prepared
            self._delete_subtree(n)
        return self.host_tokens + tokens <= self.host_pool_tokens

    def load_back(self, node: Node) -> int:
        """Bring the host-only part of the path ending at `node` to the device. Returns tokens loaded.
        The caller has made room on the device."""
        loaded = 0
        for n in self.path(node):
            if n.on_device:
                break
            self._set_device(n, True)
            loaded += n.tokens
        self.bytes_in_tokens += loaded
        return loaded

    def evict_subtree(self, top: Node, keep_host: bool) -> int:
        """Evict every unlocked device node under and including `top`, deepest first
        (a policy's offload/drop of an agent prefix). Locked nodes stay."""
        freed = 0
        for child in list(top.children.values()):
            freed += self.evict_subtree(child, keep_host)
        if top.parent is None:  # deleted with an evicted descendant chain
            return freed
        if top.on_device and top.lock_ref == 0 and not top.has_device_child():
            freed += self._evict_node(top, keep_host=keep_host)
        elif not keep_host and not top.on_device:
            self._delete_subtree(top)
        return freed

    def check_invariants(self) -> None:
        """Consistency of links and token counters (tests)."""
        dev = host = evictable = 0
        stack = [self.root]
        while stack:
            n = stack.pop()
            for k, c in n.children.items():
                assert c.parent is n and c.child_key() == k, "broken tree link"
                assert c.on_device or c.on_host, "node on neither tier"
                assert not (c.on_device and not n.on_device and n is not self.root), "device node under a host-only node"
                dev += c.tokens if c.on_device else 0
                host += c.tokens if c.on_host else 0
                evictable += c.tokens if c.on_device and c.lock_ref == 0 else 0
                stack.append(c)
        assert (dev, host, evictable) == (self.device_tokens, self.host_tokens, self.evictable_tokens), f"token counters drift {(dev, host, evictable)} != {(self.device_tokens, self.host_tokens, self.evictable_tokens)}"

    def child_of_root(self, segment_id: str) -> Node | None:
        return self.root.children.get((segment_id, 0))
