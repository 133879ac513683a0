"""Engine settings of the simulated SGLang server (names follow SGLang's server args)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from topas.engines.latency.costs import transfer_seconds


@dataclass(frozen=True)
class ClientPath:
    """The client <-> scheduler path of a real server (its client, HTTP, tokenizer manager,
    detokenizer), seconds; all zero by default (the engine alone). A call the client releases
    reaches the waiting queue `submit` later; a finished call reaches the client `return_`
    later (its recorded finish, its task's finish, the release of its successors); the client
    prepares and sends one call at a time, so calls due at the same moment leave `dispatch`
    apart, which decides which of them share a prefill batch and which find an earlier one's
    prefix cached. Submit and dispatch grow with the prompt (ids encoded, sent, parsed)."""

    submit: float = 0.0
    submit_per_token: float = 0.0
    return_: float = 0.0
    dispatch: float = 0.0
    dispatch_per_token: float = 0.0

    KEYS = ("submit", "submit_per_token", "return", "dispatch", "dispatch_per_token")

    def __post_init__(self) -> None:
        if min(getattr(self, f.name) for f in fields(self)) < 0:
            raise ValueError(f"engine.client: every term must be >= 0, got {self}")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | None) -> ClientPath:
        """From the keys of a latency profile's `request_latency_s` (unknown keys: an error)."""
        m = dict(m or {})
        unknown = sorted(set(m) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"client latency: unknown key(s) {unknown}; known: {list(cls.KEYS)}")
        return cls(**{("return_" if k == "return" else k): float(v) for k, v in m.items()})

    @property
    def serial(self) -> bool:
        """The client sends one call at a time (a dispatch term is set)."""
        return self.dispatch > 0 or self.dispatch_per_token > 0

    @property
    def per_token(self) -> bool:
        return self.submit_per_token > 0 or self.dispatch_per_token > 0

    def submit_s(self, prompt_tokens: int) -> float:
        return self.submit + self.submit_per_token * prompt_tokens

    def dispatch_s(self, prompt_tokens: int) -> float:
        return self.dispatch + self.dispatch_per_token * prompt_tokens


@dataclass(frozen=True)
class SimEngineConfig:
    kv_pool_tokens: int  # B: device KV pool (from model + GPU + mem_fraction_static, or overridden)
    max_running_requests: int
    chunked_prefill_size: int = 8192  # SGLang default on 60-160 GiB GPUs
    max_prefill_tokens: int = 16384  # SGLang default (rem_input_tokens per prefill pass)
    host_cache_ratio: float = 2.0  # HiCache host pool = ratio x device pool; 0 disables the host tier
    host_link_gbs: float = 24.0  # effective host<->device bandwidth
    host_link_latency_s: float = 5e-6  # fixed cost per transfer
    kv_bytes_per_token: int = 262144
    # Clients send max_new_tokens = true length with ignore_eos (like our SGLang driver):
    # admission then reserves exactly; otherwise a cap and SGLang's new-token ratio apply.
    ignore_eos: bool = True
    max_new_tokens_cap: int = 4096  # used when ignore_eos is false
    clip_max_new_tokens: int = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
    init_new_token_ratio: float = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    retract_decode_steps: int = 20  # SGLANG_RETRACT_DECODE_STEPS
    # Matching the waiting queue at a decision refreshes LRU times (SGLang's cache-aware path).
    touch_waiting_prefixes: bool = True
    decision_cost_s: float = 0.0  # simulated seconds charged per policy decision (default off: docs/protocol.md)
    client: ClientPath = field(default_factory=ClientPath)  # a real server's client path (off: the engine alone)

    def __post_init__(self) -> None:
        for name in ("kv_pool_tokens", "max_running_requests", "chunked_prefill_size", "max_prefill_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"engine.{name} must be positive, got {getattr(self, name)}")
        if self.host_cache_ratio < 0:
            raise ValueError(f"engine.host_cache_ratio must be >= 0, got {self.host_cache_ratio}")
        if self.host_link_gbs <= 0:
            raise ValueError(f"engine.host_link_gbs must be positive, got {self.host_link_gbs}")

    @property
    def host_pool_tokens(self) -> int:
        return int(self.kv_pool_tokens * self.host_cache_ratio)

    def transfer_time(self, tokens: int) -> float:
        """Host<->device transfer: per-transfer latency + bytes / bandwidth."""
        return transfer_seconds(tokens, self.kv_bytes_per_token, self.host_link_gbs, self.host_link_latency_s)
