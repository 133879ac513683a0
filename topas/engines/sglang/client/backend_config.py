"""`backend=sglang` options (conf/backend/sglang.yaml): the schema `SGLangBackendConfig`,
its checks (one-line `ConfigError`), and how the options resolve into a server
(profile, model folder, launch arguments, token scale, the policy's cost model).
Pure; unit-tested without sglang. The run itself is `backend.py`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topas.config import ConfigError

PINNED_SGLANG = "0.5.23"
PROFILES = ("auto", "cpu", "gpu")
HINT_CHANNELS = ("kv_hints", "custom_params", "both")
CPU_DEFAULT_POOL = 4096  # --max-total-tokens of the CPU profile when unset (docs/sglang_integration.md)


@dataclass
class SGLangBackendConfig:
    name: str = "sglang"
    profile: str = "auto"  # auto | cpu | gpu (auto: gpu when nvidia-smi lists a GPU)
    model_path: str | None = None  # None: dummy weights from the model config's hf_config folder
    load_format: str | None = None  # None: "dummy" without model_path, "auto" with it
    dtype: str | None = None  # SGLang --dtype (None: the model's)
    max_total_tokens: int | None = None  # KV pool (tokens); None: SGLang sizes it (cpu profile: 4096)
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    schedule_policy: str = "fcfs"  # SGLang's own queue order, before the plugin rewrites it
    enable_hierarchical_cache: bool = False  # HiCache host tier (CUDA only)
    hicache_ratio: float | None = None  # host pool / device pool (SGLang default 2.0)
    tp_size: int = 1  # the plugin runs one policy per scheduler process: only 1 is supported
    extra_args: list[str] = field(default_factory=list)  # more sglang.launch_server args, verbatim
    token_scale: float | None = None  # x every prefix/input/output length; None: automatic (topas/workloads/scaling.py)
    time_scale: float = 1.0  # x arrival times and client gaps
    hint_channel: str = "kv_hints"  # kv_hints | custom_params | both
    stream: bool = False  # stream answers (client-side first-token times; more server work)
    warmup_requests: int = 2  # before the replay, invisible to the policy; then the cache is flushed
    decision_trigger: str = "change"  # plugin: change | pass
    cost_model: dict[str, Any] | None = None  # LinearCostModel fields; None: cpu defaults / fitted on gpu
    latency: str = "auto"  # latency predictor the gpu cost model is fitted from
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 3600.0
    replay_timeout_s: float | None = None  # whole replay; None: no limit
    python: str | None = None  # interpreter with sglang (None: this one)
    reuse_server: bool = False  # keep the server up for the next run of this process (same server options)
    gpus_per_run: int = 1  # GPUs each run's server is given (placement.py: one worker per group of this many)



def gpu_visible() -> bool:
    """True when `nvidia-smi -L` lists at least one GPU."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return False
    try:
        p = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def resolve_profile(b: SGLangBackendConfig) -> str:
    return ("gpu" if gpu_visible() else "cpu") if b.profile == "auto" else b.profile


def check_config(b: SGLangBackendConfig) -> None:
    """One-line ConfigError for an invalid combination of options."""
    def bad(msg: str) -> None:
        raise ConfigError(f"backend (sglang): {msg}")

    if b.profile not in PROFILES:
        bad(f"profile must be one of {', '.join(PROFILES)}, got '{b.profile}'")
    if b.token_scale is not None and not (0 < b.token_scale <= 1):
        bad(f"token_scale must be in (0, 1] or null (automatic), got {b.token_scale}")
    if not b.time_scale > 0:
        bad(f"time_scale must be positive, got {b.time_scale}")
    if b.hint_channel not in HINT_CHANNELS:
        bad(f"hint_channel must be one of {', '.join(HINT_CHANNELS)}, got '{b.hint_channel}'")
    if b.decision_trigger not in ("change", "pass"):
        bad(f"decision_trigger must be change or pass, got '{b.decision_trigger}'")
    if b.tp_size != 1:
        bad(f"tp_size={b.tp_size}: the topas plugin runs one policy per scheduler process; only tp_size=1 is supported")
    for k in ("max_total_tokens", "chunked_prefill_size", "max_running_requests"):
        v = getattr(b, k)
        if v is not None and v <= 0:
            bad(f"{k} must be positive, got {v}")
    if b.mem_fraction_static is not None and not (0 < b.mem_fraction_static < 1):
        bad(f"mem_fraction_static must be in (0, 1), got {b.mem_fraction_static}")
    if b.hicache_ratio is not None and not b.hicache_ratio > 0:
        bad(f"hicache_ratio must be positive, got {b.hicache_ratio}")
    if b.gpus_per_run < 1:
        bad(f"gpus_per_run must be >= 1, got {b.gpus_per_run}")
    if b.warmup_requests < 0:
        bad(f"warmup_requests must be >= 0, got {b.warmup_requests}")
    for k in ("startup_timeout_s", "request_timeout_s"):
        if not getattr(b, k) > 0:
            bad(f"{k} must be positive")
    if b.replay_timeout_s is not None and not b.replay_timeout_s > 0:
        bad("replay_timeout_s must be positive or null")
    if b.load_format is not None and b.load_format != "dummy" and b.model_path is None:
        bad(f"load_format={b.load_format} needs model_path (a checkpoint folder)")
    if b.cost_model is not None:
        from topas.engines.sglang.costs import load_cost_model

        try:
            load_cost_model(dict(b.cost_model))
        except (TypeError, ValueError) as e:
            bad(f"cost_model: {str(e).splitlines()[0]}")
    managed = {
        "--model-path", "--model", "--host", "--port", "--load-format", "--max-total-tokens",
        "--max-running-requests", "--chunked-prefill-size", "--schedule-policy", "--dtype",
        "--mem-fraction-static", "--enable-hierarchical-cache", "--hicache-ratio", "--skip-tokenizer-init",
    }
    clash = sorted({a.split("=")[0] for a in map(str, b.extra_args)} & managed)
    if clash:
        bad(f"extra_args {', '.join(clash)}: set the backend option instead")


def model_dir(b: SGLangBackendConfig, model) -> Path:
    """The folder given to --model-path."""
    if b.model_path is not None:
        p = Path(b.model_path).expanduser()
        if not p.exists():
            raise ConfigError(f"backend (sglang): model_path {p} does not exist")
        return p
    from topas.engines.latency.specs import resolve_hf_config

    try:
        cfg = resolve_hf_config(model)
    except ValueError as e:
        raise ConfigError(f"backend (sglang): {e}; set backend.model_path") from None
    if not cfg.is_file():
        raise ConfigError(f"backend (sglang): model {model.name}: no HF config at {cfg}")
    return cfg.parent


def server_args(b: SGLangBackendConfig, profile: str) -> tuple[dict[str, Any], list[str]]:
    """ServerConfig keyword arguments and extra launch args from the backend options."""
    pool = b.max_total_tokens if b.max_total_tokens is not None else (CPU_DEFAULT_POOL if profile == "cpu" else None)
    extra: list[str] = []
    if b.mem_fraction_static is not None:
        extra += ["--mem-fraction-static", str(b.mem_fraction_static)]
    if b.enable_hierarchical_cache:
        extra.append("--enable-hierarchical-cache")
        if b.hicache_ratio is not None:
            extra += ["--hicache-ratio", str(b.hicache_ratio)]
    if profile == "gpu" and not any(str(a) in ("--tp", "--tp-size", "--tensor-parallel-size") for a in b.extra_args):
        extra += ["--tp-size", str(b.tp_size)]
    extra += [str(a) for a in b.extra_args]
    kw = dict(
        load_format=b.load_format or ("dummy" if b.model_path is None else "auto"),
        profile=profile,
        schedule_policy=b.schedule_policy,
        max_total_tokens=pool,
        max_running_requests=b.max_running_requests,
        chunked_prefill_size=b.chunked_prefill_size,
        dtype=b.dtype,
        startup_timeout_s=b.startup_timeout_s,
        decision_trigger=b.decision_trigger,
    )
    return kw, extra


def fitted_cost_model(model, gpu, kind: str = "auto") -> dict[str, float]:
    """`LinearCostModel` fields fitted to the project's latency predictor for model/GPU:
    prefill = base + tokens / rate (512 and 4096 new tokens); decode step = base +
    per_seq x batch + per_ctx_token x batch x context (batch 1/32, context 1k/4k)."""
    from topas.engines.latency.factory import build_latency_model

    lat = build_latency_model(kind, model, gpu)
    p1, p2 = lat.prefill([(512, 0)]), lat.prefill([(4096, 0)])
    rate = (4096 - 512) / max(p2 - p1, 1e-9)
    d11, d321, d324 = lat.decode(1, 1024), lat.decode(32, 1024), lat.decode(32, 4096)
    per_ctx = max((d324 - d321) / (32 * 3072), 0.0)
    per_seq = max((d321 - d11) / 31 - per_ctx * 1024, 0.0)
    return {
        "bytes_per_token": int(model.kv_bytes_per_token),
        "prefill_tokens_per_s": float(rate),
        "prefill_base_s": float(max(p1 - 512 / rate, 0.0)),
        "decode_base_s": float(max(d11 - per_seq - per_ctx * 1024, 0.0)),
        "decode_per_seq_s": float(per_seq),
        "decode_per_ctx_token_s": float(per_ctx),
        "swap_bandwidth_bytes_per_s": float(gpu.host_link_gbs) * 1e9,
        "swap_latency_s": float(gpu.host_link_latency_s),
    }


def resolve_cost_model(b: SGLangBackendConfig, profile: str, model, gpu) -> dict[str, Any] | None:
    if b.cost_model is not None:
        return dict(b.cost_model)
    if profile == "cpu":
        return None  # costs.py defaults (measured with the tiny model on CPU)
    try:
        return fitted_cost_model(model, gpu, b.latency)
    except Exception as e:  # noqa: BLE001 - the policy still runs, with the defaults
        print(f"warning: sglang backend: cost model not fitted ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
              "policies see the CPU defaults of costs.py", file=sys.stderr)
        return None


def resolve_token_scale(b: SGLangBackendConfig, trace, model, pool: int | None) -> float:
    from topas.workloads.scaling import auto_token_scale, max_call_tokens, scale_trace

    scale = b.token_scale if b.token_scale is not None else auto_token_scale(trace, model.context_len, pool)
    biggest = max_call_tokens(scale_trace(trace, scale))
    if biggest > model.context_len or (pool is not None and biggest > pool):
        limit = model.context_len if pool is None else min(model.context_len, pool)
        raise ConfigError(
            f"backend (sglang): the largest call has {biggest} tokens (token_scale {scale:g}), more than the "
            f"{limit} the server can hold (model {model.name}); lower backend.token_scale or use a larger model"
        )
    return scale


def sglang_version(python: str) -> str | None:
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return p.stdout.strip() or None
