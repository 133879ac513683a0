"""The two worlds of the differential tests (tests/sglang/test_differential.py): the
simulator's radix cache (`topas/engines/sim/radix.py`) and one of sglang 0.5.23's own (the
legacy `RadixCache`, the `UnifiedRadixCache` with its Rust or its Python tree core), driven
by the same operations, every result compared. Import it after `require_sglang()`.

HiCache (`World(..., hicache=True)`, the unified tree's Python core only): the host tier is
switched on (`UnifiedTreeCore.set_hicache_enabled`), every inserted node is backed up
(write-through), eviction demotes to the host (`evict_device_leaf`), the host pool is large
enough never to drop a copy. A HiCache controller (host KV pool, transfer engine) cannot be
built on the CPU install, so the backup is committed directly (`commit_backup`) and no KV
moves.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from sglang.srt.managers import schedule_policy
from sglang.srt.mem_cache import radix_cache as legacy_module
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache as SGLangRadixCache
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from topas.engines.sim.radix import RadixCache, Run
from topas.policy import RequestInfo


class _Clock:
    """time.monotonic() as a counter: distinct LRU stamps, reproducible runs."""

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        self.t += 1.0
        return self.t


def sglang_patches(mp: pytest.MonkeyPatch) -> None:
    """No server here: the legacy tree's LRU clock becomes a counter (the unified tree already
    uses one), and the two server settings `calc_priority` reads come from a stub with the
    server defaults (no disaggregation, LRU eviction) instead of a published runtime context."""
    mp.setattr(legacy_module, "time", _Clock())
    mp.setattr(schedule_policy, "get_disagg", lambda: SimpleNamespace(disaggregation_mode="null"))
    mp.setattr(schedule_policy, "get_memory", lambda: SimpleNamespace(radix_eviction_policy="lru"))


class Tokens:
    """Token ids of segment runs: (segment id, position) -> a distinct id, as the simulator assumes."""

    def __init__(self) -> None:
        self.base: dict[str, int] = {}

    def ids(self, runs: list[Run]) -> array:
        out = array("q")
        for sid, start, n in runs:
            b = self.base.setdefault(sid, (len(self.base) + 1) << 16)
            out.extend(range(b + start, b + start + n))
        return out


class FreshSlots(TokenToKVPoolAllocator):
    """sglang's token allocator, handing out fresh slot ids and dropping frees: the trees only
    carry the ids (no KV here), and a free into sglang's pool copies the whole free list."""

    def __init__(self) -> None:
        super().__init__(1024, torch.bfloat16, "cpu", None, need_sort=False)
        self.next_slot = 1

    def alloc(self, need_size: int):
        out = torch.arange(self.next_slot, self.next_slot + need_size, dtype=torch.int64)
        self.next_slot += need_size
        return out

    def free(self, free_index) -> None:
        pass


@dataclass(eq=False)
class WaitingReq:
    """What the simulator's view reads of a waiting `SimRequest` (rid, fill_runs, info)."""

    rid: str
    prompt: list[Run]
    prefix_tokens: int
    generated: list[Run] = field(default_factory=list)  # output kept across a retraction

    def fill_runs(self) -> list[Run]:
        return self.prompt + self.generated

    def info(self, cached: int = 0, host_cached: int = 0, cached_nodes: tuple[int, ...] = ()) -> RequestInfo:
        return RequestInfo(
            rid=self.rid, task_id=0, node=self.rid, stage="s", agent=self.prompt[0][0], task_arrival=0.0,
            ready_time=0.0, prompt_tokens=sum(n for _, _, n in self.prompt), prefix_tokens=self.prefix_tokens,
            cached_tokens=cached, host_cached_tokens=host_cached,
            generated_tokens=sum(n for _, _, n in self.generated),
            segments=tuple((sid, n) for sid, _, n in self.prompt), cached_nodes=cached_nodes,
        )


class World:
    """The simulator's cache and one of sglang's, driven by the same operations."""

    def __init__(self, kind: str, hicache: bool = False) -> None:
        self.kind = kind
        self.hicache = hicache
        self.tok = Tokens()
        self.sim = RadixCache(1 << 30, host_pool_tokens=(1 << 30) if hicache else 0)
        self.alloc = FreshSlots()
        params: dict[str, Any] = dict(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.alloc,
                                      page_size=1)
        if kind == "legacy":
            self.sg = SGLangRadixCache(CacheInitParams(**params))
        else:
            self.sg = UnifiedRadixCache(CacheInitParams(**params, tree_components=(ComponentType.FULL,),
                                                        tree_core_backend=kind.split("-")[1]))
            if hicache:
                self.sg.tree_core.set_hicache_enabled()
                self.host_slot = 0
        self.locks: list[tuple[Any, Any]] = []
        self.evicted = 0
        self.log: list[str] = []  # the operations so far, for a failure message

    def check(self, what: str, ours: Any, theirs: Any) -> None:
        if ours != theirs:
            raise AssertionError(f"{what}: simulator {ours!r} != sglang {theirs!r}\n  after: " + "; ".join(self.log[-12:]))

    # -- operations (each compared)
    def insert(self, runs: list[Run], lock: bool = False) -> None:
        ids = self.tok.ids(runs)
        self.log.append(f"insert {runs}")
        before = self.sim.match(runs, touch=False, split=False)  # read-only
        node, _ = self.sim.insert(runs)
        res = self.sg.insert(InsertParams(key=RadixKey(ids), value=self.alloc.alloc(len(ids))))
        self.check("insert: tokens already cached (device + host)", before.device_tokens + before.host_tokens,
                   res.prefix_len)
        if self.hicache:
            self._backup_path(res.last_device_node)
        if lock:
            self.sim.lock(node)
            handle = res.last_device_node
            if self.kind == "legacy":
                self.sg.inc_lock_ref(handle)
            else:
                handle = self.sg.lock(handle)
            self.locks.append((node, handle))
        self.check_sizes()

    def unlock(self, i: int) -> None:
        node, handle = self.locks.pop(i)
        self.log.append("unlock")
        self.sim.unlock(node)
        if self.kind == "legacy":
            self.sg.dec_lock_ref(handle)
        else:
            self.sg.unlock(handle)
        self.check_sizes()

    def match(self, runs: list[Run]) -> None:
        self.log.append(f"match {runs}")
        m = self.sim.match(runs)
        r = self.sg.match_prefix(MatchPrefixParams(key=RadixKey(self.tok.ids(runs))))
        self.check("match: device tokens", m.device_tokens, r.device_prefix_len)
        self.check("match: host tokens", m.host_tokens, r.host_hit_length)

    def evict(self, tokens: int) -> None:
        self.log.append(f"evict {tokens}")
        freed = self.sim.evict(tokens)
        if self.hicache:
            theirs = self._evict_hicache(tokens)
        else:
            theirs = self.sg.evict(EvictParams(num_tokens=tokens)).num_tokens_evicted
        self.check("evict: tokens freed", freed, theirs)
        self.evicted += freed
        self.check_sizes()

    def check_sizes(self) -> None:
        self.check("evictable device tokens", self.sim.evictable_tokens, self.sg.evictable_size())
        self.check("device tokens", self.sim.device_tokens, self.sg.evictable_size() + self.sg.protected_size())

    # -- HiCache: write-through backup of every new node, eviction demotes to the host
    def _backup_path(self, node_id: int) -> None:
        core = self.sg.tree_core
        node = core.node_by_id(node_id)
        while node is not core.root_node and not node.backuped:
            n = len(node.key)
            core.commit_backup(node.id, torch.arange(self.host_slot, self.host_slot + n), {})
            self.host_slot += n
            node = node.parent

    def _evict_hicache(self, tokens: int) -> int:
        """sglang's device eviction walk (`UnifiedRadixCache._evict_components` for FULL:
        LRU device leaves, a backed-up leaf is demoted), without a controller."""
        core, full = self.sg.tree_core, ComponentType.FULL
        tracker = {full: 0}
        core.evict_device_start(full, tokens)
        try:
            while tracker[full] < tokens:
                node_id, _ = self.sg._evict_device_next_node(full, tracker)
                if node_id is None:
                    break
                self.sg._evict_device_leaf(node_id, tracker)
        finally:
            core.evict_device_end(full)
        return tracker[full]
