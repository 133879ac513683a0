"""Device KV pool accounting and SGLang's prefill admission budget.

`PrefillBudget` ports the token arithmetic of SGLang 0.5.23 `PrefillAdder` /
`mem_cache/prefill_budget.py` for page size 1, a plain radix cache, no SWA/mamba:
- running requests reserve min(max_new - generated, CLIP) x ratio (ratio 1.0 with ignore_eos);
- a candidate needs extend + min(max_new - generated, CLIP) + 1 < free + evictable - offsets,
  evaluated while its matched prefix is locked (so it is not counted as evictable);
- a candidate longer than the remaining chunk budget is truncated (chunked prefill; it
  then reserves no decode tokens); a pass spends at most chunked_prefill_size and
  max_prefill_tokens compute tokens.
Admission only reserves; the engine allocates after the pass (as SGLang does in
`prepare_for_extend`), except host load-back which allocates during admission.
"""

from __future__ import annotations

from enum import Enum

from topas.engines.sim.config import SimEngineConfig
from topas.engines.sim.entities import SimRequest
from topas.engines.sim.radix import RadixCache, truncate_runs


class KVPool:
    """Device KV: radix-tree tokens + requests' private tokens never exceed the pool (kv_pool_tokens)."""

    def __init__(self, kv_pool_tokens: int, cache: RadixCache) -> None:
        self.kv_pool_tokens = kv_pool_tokens
        self.cache = cache
        self.private = 0

    @property
    def used(self) -> int:
        return self.cache.device_tokens + self.private

    @property
    def free(self) -> int:
        return self.kv_pool_tokens - self.used

    @property
    def available(self) -> int:
        """Free plus reclaimable (unlocked cached) tokens."""
        return self.free + self.cache.evictable_tokens

    def make_room(self, tokens: int) -> bool:
        if self.free < tokens:
            self.cache.evict(tokens - self.free)
        return self.free >= tokens

    def alloc_private(self, tokens: int) -> None:
        if not self.make_room(tokens):
            raise RuntimeError(f"KV pool overflow: need {tokens} tokens, {self.free} free")
        self.private += tokens

    def free_private(self, tokens: int) -> None:
        self.private -= tokens
        assert self.private >= 0


class AddResult(Enum):
    CONTINUE = "continue"
    NO_TOKEN = "no_token"  # memory budget exhausted
    OTHER = "other"  # compute budget (chunk / input tokens) exhausted


class PrefillBudget:
    def __init__(self, cfg: SimEngineConfig, pool: KVPool, running: list[SimRequest], new_token_ratio: float) -> None:
        self.cfg = cfg
        self.pool = pool
        self.cache = pool.cache
        self.ratio = new_token_ratio
        self.total_offset = sum(self.running_reservation(r) for r in running)
        self.current_offset = 0
        self.rem_input = cfg.max_prefill_tokens
        self.rem_chunk = cfg.chunked_prefill_size
        self.admitted: list[SimRequest] = []
        self.new_chunked: SimRequest | None = None

    def running_reservation(self, r: SimRequest) -> float:
        ratio = 1.0 if self.cfg.ignore_eos else self.ratio
        return min(r.max_new_tokens - r.generated, self.cfg.clip_max_new_tokens) * ratio

    @property
    def remaining_total(self) -> float:
        return self.pool.available - self.total_offset

    @property
    def remaining_current(self) -> float:
        return self.pool.available - self.current_offset

    def state(self) -> AddResult:
        if not (self.remaining_total > 0 and self.remaining_current > 0):
            return AddResult.NO_TOKEN
        if self.rem_input <= 0 or self.rem_chunk <= 0:
            return AddResult.OTHER
        return AddResult.CONTINUE

    def _reserve(self, extend: int, max_new: int) -> None:
        immediate = extend + 1  # one page of allocation slack per request
        self.total_offset += immediate + max_new
        self.current_offset += immediate
        self.rem_input -= extend
        self.rem_chunk -= extend

    def add_chunked(self, req: SimRequest) -> bool:
        """Continue the in-flight chunked request (SGLang `add_chunked_req`). True if more chunks remain."""
        avail = min(self.rem_chunk, int(self.remaining_total))
        rem = avail if avail > 0 else self.rem_chunk  # a continuation must make progress
        left = req.fill_len - req.fill_done
        extend = min(left, rem)
        truncated = left > rem
        req.extend_now = extend
        self.admitted.append(req)
        max_new = 0 if truncated else min(req.max_new_tokens - req.generated, self.cfg.clip_max_new_tokens)
        self._reserve(extend, max_new)
        return truncated

    def add_one(self, req: SimRequest) -> tuple[bool, AddResult, int]:
        """Try to admit a waiting request (SGLang `add_one_req`).
        Returns (admitted, budget state for the next candidate, host tokens loaded)."""
        cfg = self.cfg
        fill_runs = req.fill_runs()
        fill_len = req.prompt_tokens + req.generated
        # At least one token must be computed to produce logits (SGLang caps the match at len-1).
        m = self.cache.match(truncate_runs(fill_runs, fill_len - 1))
        max_new = min(max(req.max_new_tokens - req.generated, 0), cfg.clip_max_new_tokens)
        cand_extend = fill_len - m.device_tokens
        total_tokens = cand_extend + max_new + 1
        self.cache.lock(m.device_node)  # temporary pin: excluded from the evictable budget
        try:
            if not total_tokens < self.remaining_total:
                return False, AddResult.NO_TOKEN, 0
            prefix = m.device_tokens
            loaded = 0
            lock_node = m.device_node
            if m.host_tokens:
                self.cache.lock(m.host_node)  # keep the path while making room for it
                ok = self.pool.make_room(m.host_tokens)
                self.cache.unlock(m.host_node)
                if not ok:
                    return False, AddResult.NO_TOKEN, 0
                loaded = self.cache.load_back(m.host_node)
                prefix += loaded
                lock_node = m.host_node
            extend = fill_len - prefix
            chunked = extend > self.rem_chunk
            if chunked:
                extend = self.rem_chunk
                if extend <= 0:
                    return False, AddResult.OTHER, loaded
            self.cache.lock(lock_node)
            req.lock_node = lock_node
            req.fill_len = fill_len
            req.fill_done = prefix
            req.extend_now = extend
            if req.prefix_hit_tokens is None:
                req.prefix_hit_tokens = m.device_tokens
                req.host_hit_tokens = loaded
            self.admitted.append(req)
            if chunked:
                self.new_chunked = req
            self._reserve(extend, 0 if chunked else max_new)
            return True, self.state(), loaded
        finally:
            self.cache.unlock(m.device_node)
