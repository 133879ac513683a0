"""Read-only and pinning access to SGLang 0.5.23's prefix caches (`UnifiedRadixCache`, the
legacy `RadixCache`), without importing either at module level."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class PinHandle:
    """A lock held on the radix node that ends exactly at an agent prefix."""

    tokens: int
    lock: Any  # sglang TreeLock


class CacheProbe:
    """Queries and pins on `UnifiedRadixCache` (what the 0.5.23 server builds) or the
    legacy `RadixCache`, without importing either at module level.

    - `device_match` is read-only (no LRU touch, no split): for the unified cache it is
      `tree_core.match_full_device_prefix` (Python and Rust tree cores); for the legacy
      cache a walk over `root_node.children`.
    - `host_match` uses `match_prefix` (it touches LRU and may split a node) and only
      when a host tier (HiCache) is attached; otherwise 0.
    - `pin` splits the node at the prefix boundary if needed (via `match_prefix`) and
      takes `cache.lock(node)` (= `inc_lock_ref`; `unpin` = `unlock` = `dec_lock_ref`),
      the same lock a running request holds on its matched prefix.
    """

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.unified = hasattr(cache, "tree_core")
        self.page_size = int(getattr(cache, "page_size", 1) or 1)

    def key(self, ids: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> Any:
        from sglang.srt.mem_cache.radix_cache import RadixKey

        tok = ids if isinstance(ids, array) and ids.typecode == "q" else array("q", ids)
        return RadixKey(tok, extra_key=extra_key, cache_salt=cache_salt)

    @property
    def disabled(self) -> bool:
        return bool(getattr(self.cache, "disable", False))

    @property
    def has_host_tier(self) -> bool:
        return getattr(self.cache, "cache_controller", None) is not None

    def device_match(self, key: Any) -> tuple[int, Any, int]:
        """(device-resident matched tokens, deepest matched node, tokens spanned by the
        path to that node). The last differs from the first when the match ends inside a node."""
        if self.disabled:
            return 0, None, 0
        if self.unified:
            n, node, span = self.cache.tree_core.match_full_device_prefix(key)
            return int(n), node, int(span)
        ps = self.page_size
        node = self.cache.root_node
        k = key.page_aligned(ps)
        matched = span = 0
        while len(k) > 0:
            child = node.children.get(k.child_key(ps))
            if child is None or child.value is None:
                break
            n = child.key.match(k, page_size=ps)
            if n == 0:
                break
            matched += n
            span += len(child.key)
            node = child
            if n < len(child.key):
                break
            k = k[n:]
        return matched, node, span

    def device_tokens(self, ids: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> int:
        if not ids:
            return 0
        return self.device_match(self.key(ids, extra_key, cache_salt))[0]

    def host_tokens(self, ids: Sequence[int], extra_key: str | None = None, cache_salt: str | None = None) -> int:
        """Tokens beyond the device match that are resident on the host tier (0 without one)."""
        if not ids or not self.has_host_tier or self.disabled:
            return 0
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

        r = self.cache.match_prefix(MatchPrefixParams(key=self.key(ids, extra_key, cache_salt)))
        return int(getattr(r, "host_hit_length", 0) or 0)

    def pin(self, ids: Sequence[int]) -> PinHandle | None:
        """Lock the device-resident path of `ids` (an agent prefix). None if the prefix is
        not fully on device (nothing to pin; a policy wanting it resident must let a
        request of that agent run, or a host tier load it back)."""
        target = len(ids) // self.page_size * self.page_size
        if target == 0 or self.disabled:
            return None
        key = self.key(ids[:target])
        n, node, span = self.device_match(key)
        if n < target:
            return None
        if span > n:  # the node runs past the prefix: split it at the boundary first
            from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams

            self.cache.match_prefix(MatchPrefixParams(key=key))
            n, node, span = self.device_match(key)
            if n < target:
                return None
        return PinHandle(tokens=n, lock=self.cache.lock(node))

    def unpin(self, handle: PinHandle) -> None:
        self.cache.unlock(handle.lock)

    def evictable_tokens(self) -> int:
        return int(self.cache.evictable_size()) if not self.disabled else 0
