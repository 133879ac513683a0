"""Settings of the simulated SGLang server (names follow SGLang's server args), each defined once:

- `SimServerArgs`: the server's own settings, set by `backend=sim` and used by the engine as they are;
- `SimBackendConfig`: `backend=sim`'s schema (conf/backend/sim.yaml) = the server args + how the
  engine is built (latency predictor, KV pool overrides, client path); its defaults are what that
  file composes (Hydra's config store, `backend/schema/sim`: `hydra_node`);
- `SimEngineConfig`: what the engine runs with = the server args + the values resolved from the
  model, the GPU and the overrides (`topas.engines.sim.backend.engine_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

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
class SimServerArgs:
    """The simulated server's settings that `backend=sim` sets and the engine uses unchanged."""

    chunked_prefill_size: int = 8192  # SGLang default on 60-160 GiB GPUs
    max_prefill_tokens: int = 16384  # SGLang default (rem_input_tokens per prefill pass)
    host_cache_ratio: float = 2.0  # HiCache host pool = ratio x device pool (SGLang default); 0 disables it
    # Clients send max_new_tokens = true length with ignore_eos (like our SGLang driver):
    # admission then reserves exactly; otherwise a cap and SGLang's new-token ratio apply.
    ignore_eos: bool = True
    max_new_tokens_cap: int = 4096  # client cap, used when ignore_eos is false
    # Matching the waiting queue at a decision refreshes LRU times (SGLang's cache-aware path).
    touch_waiting_prefixes: bool = True
    decision_cost_s: float = 0.0  # simulated seconds charged per policy decision (default off: docs/protocol.md)


@dataclass(frozen=True)
class SimBackendConfig(SimServerArgs):
    """`backend=sim` (conf/backend/sim.yaml): the server args and how the engine is built."""

    name: str = "sim"
    latency: str = "aiconfigurator"  # aiconfigurator | roofline | auto | profile
    latency_profile: str | None = None  # measured latency file, for latency=profile
    kv_pool_tokens: int | None = None  # SGLang --max-total-tokens; None: from model + GPU
    mem_fraction_static: float | None = None  # None: SGLang 0.5.23's rule (arg_groups/memory_hook.py)
    max_running_requests: int | None = None  # None: SGLang's rule from the pool size
    # a real server's client path, seconds: ClientPath.KEYS; None: the latency profile's
    # request_latency_s with latency=profile, else none (the engine alone)
    client_latency: dict[str, float] | None = None

    # topas.checks rules of the numbers (None always passes), checked by topas.config.validate
    RANGES: ClassVar[dict[str, str]] = {
        "kv_pool_tokens": ">= 1",
        "mem_fraction_static": "in (0, 1]",
        "max_running_requests": ">= 1",
        "chunked_prefill_size": ">= 1",
        "max_prefill_tokens": ">= 1",
        "host_cache_ratio": ">= 0",
        "max_new_tokens_cap": ">= 1",
        "decision_cost_s": ">= 0",  # negative would run simulated time backwards
    }

    def server_args(self) -> dict[str, Any]:
        """The `SimServerArgs` fields, as set."""
        return {f.name: getattr(self, f.name) for f in fields(SimServerArgs)}


@dataclass(frozen=True, kw_only=True)
class SimEngineConfig(SimServerArgs):
    """The engine's settings: the server args + the values resolved for one model and GPU."""

    kv_pool_tokens: int  # B: device KV pool (from model + GPU + mem_fraction_static, or overridden)
    max_running_requests: int
    host_link_gbs: float = 24.0  # effective host<->device bandwidth
    host_link_latency_s: float = 5e-6  # fixed cost per transfer
    kv_bytes_per_token: int = 262144
    # SGLang's environment constants (not options of backend=sim)
    clip_max_new_tokens: int = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
    init_new_token_ratio: float = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    retract_decode_steps: int = 20  # SGLANG_RETRACT_DECODE_STEPS
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


def hydra_node() -> dict[str, Any]:
    """conf/backend/sim.yaml composes `schema/sim` (its `defaults` list): the schema's defaults as a plain mapping
    (stored by hydra_plugins/topas_conf when Hydra starts), so a run's config lists every key (its folder hash
    is unchanged) while each value is written once, here. A subgroup, so `backend=` offers only the backends."""
    defaults = asdict(SimBackendConfig())
    # the key order conf/backend/sim.yaml always had: a run's config.yaml stays the same byte for byte
    first = ("name", "latency", "latency_profile", "kv_pool_tokens", "mem_fraction_static", "max_running_requests")
    return {k: defaults.pop(k) for k in first} | defaults
