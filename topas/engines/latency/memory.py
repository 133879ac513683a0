"""Device KV pool sizing, mirroring SGLang 0.5.23.

Sources (sglang 0.5.23 wheel):
- ``srt/arg_groups/memory_hook.py::handle_gpu_memory_settings`` picks
  ``mem_fraction_static`` when ``--mem-fraction-static`` is unset::

      reserved_mb = 512                                   # attention-backend metadata
                  + 1.5 * max(chunked_prefill_size, 2048) # activations (MiB per token)
                  + tp * pp / 8 * 1024                    # parallel slack
                  + reserve_for_graph_mb                  # 2 * decode cuda-graph max_bs
                                                          # + 8 * len(prefill BCG buckets)
      reserved_mb = max(reserved_mb, 10 * 1024)  if gpu_mb > 60 * 1024
      mem_fraction_static = round((gpu_mb - reserved_mb) / gpu_mb, 3)

  On CUDA the prefill "breakable" CUDA graph (BCG) is on by default in 0.5.23
  (``cuda_graph_config.default_prefill_backend``); its buckets are
  ``generate_prefill_cuda_graph_batch_sizes(chunked_prefill_size)`` (58 buckets for
  8192 -> 464 MiB). ``prefill_cuda_graph=False`` drops that term.
- ``srt/mem_cache/kv_cache_configurator.py::_profile_available_bytes``: KV budget =
  free memory after loading weights - free-before-load x (1 - mem_fraction_static).
  We model free-before-load as the whole device (``runtime_overhead_gib`` = CUDA
  context etc., default 0) so KV bytes = gpu_bytes x mem_fraction_static - weights.
- ``resolve_max_num_reqs``: ``min(max(min(int(tokens/context_len*512), 4096), 2048), tokens//2)``.

Resulting numbers (defaults: chunked_prefill_size 8192, tp 1, decode graph max_bs 256,
prefill BCG on; GPU memory as nvidia-smi reports it: A100-80GB 81920 MiB, H100-80GB
81559 MiB, H200 143771 MiB; reserved = 13904 MiB on all three). Checked against
sglang 0.5.23's own resolution pipeline (``ServerArgs.resolve_once`` with the device
capacity patched, in .venv-sglang): 0.830 for 81920 and 81559 MiB, 0.903 for 143771 MiB::

    model         GPU        mem_frac  weights GiB  KV GiB  KV tokens  max_running_requests
    qwen2_5_32b   A100-80GB  0.830     61.02          5.38     22,035  2048
    qwen2_5_32b   H100-80GB  0.830     61.02          5.09     20,845  2048
    qwen2_5_32b   H200       0.903     61.02         65.76    269,356  4096
    qwen2_5_14b   A100-80GB  0.830     27.51         38.89    212,384  3318
    qwen2_5_14b   H100-80GB  0.830     27.51         38.60    210,797  3293
    qwen2_5_14b   H200       0.903     27.51         99.27    542,146  4096
    qwen2_5_7b    A100-80GB  0.830     14.19         52.21    977,547  4096
    qwen2_5_7b    H100-80GB  0.830     14.19         51.92    972,107  4096
    qwen2_5_7b    H200       0.903     14.19        112.59  2,108,159  4096
    llama3_1_8b   A100-80GB  0.830     14.96         51.44    421,420  2048
    llama3_1_8b   H100-80GB  0.830     14.96         51.15    419,040  2048
    llama3_1_8b   H200       0.903     14.96        111.82    916,063  3578

(see ``python -m topas.engines.latency.memory`` for the full table). A figure of
0.875 / ~37k tokens for Qwen2.5-32B on A100-80GB (docs/engine_model.md) applies only
the 10 GiB floor; the code's activation term alone is 1.5 x 8192 = 12 GiB, so the
floor does not bind and SGLang 0.5.23 resolves 0.830 (~22k tokens). Pass
``mem_fraction_static=0.875`` (or ``override``) to reproduce that number.
"""

from __future__ import annotations

import math

from topas.engines.latency.base import GpuSpec, ModelSpec

GIB = 1 << 30


def prefill_cuda_graph_buckets(max_tokens: int) -> list[int]:
    """sglang ``generate_prefill_cuda_graph_batch_sizes``: captured token buckets."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1024 + 1, 64))
        + list(range(1280, 4096 + 1, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return [s for s in sizes if s <= max_tokens]


def default_chunked_prefill_size(gpu_mb: float) -> int:
    """SGLang's GPU-memory tiers (memory_hook.py): 2k < 20 GiB, 4k < 60 GiB, 8k < 160 GiB, else 16k."""
    for limit_gib, size in ((20, 2048), (60, 4096), (160, 8192)):
        if gpu_mb < limit_gib * 1024:
            return size
    return 16384


def reserved_memory_mb(
    gpu_mb: float,
    chunked_prefill_size: int = 8192,
    tp_size: int = 1,
    pp_size: int = 1,
    decode_cuda_graph_max_bs: int = 256,
    prefill_cuda_graph: bool = True,
) -> float:
    """MiB SGLang keeps outside the static pool (activations + graphs + slack)."""
    reserved = 512.0
    reserved += max(chunked_prefill_size, 2048) * 1.5
    reserved += tp_size * pp_size / 8 * 1024
    reserved += decode_cuda_graph_max_bs * 2  # reserve_for_graph_mb: decode graphs
    if prefill_cuda_graph:  # reserve_for_graph_mb: non-torch memory of prefill BCG
        reserved += len(prefill_cuda_graph_buckets(chunked_prefill_size)) * 8
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def default_mem_fraction_static(
    gpu: GpuSpec,
    chunked_prefill_size: int | None = 8192,
    tp_size: int = 1,
    pp_size: int = 1,
    prefill_cuda_graph: bool = True,
) -> float:
    gpu_mb = gpu.memory_gib * 1024
    if chunked_prefill_size is None:
        chunked_prefill_size = default_chunked_prefill_size(gpu_mb)
    reserved = reserved_memory_mb(
        gpu_mb, chunked_prefill_size, tp_size, pp_size, gpu.cuda_graph_max_bs, prefill_cuda_graph
    )
    return round((gpu_mb - reserved) / gpu_mb, 3)


def kv_bytes_per_token(model: ModelSpec, tp_size: int = 1) -> int:
    """Per-GPU KV bytes per token: KV heads are split over TP (replicated if fewer)."""
    heads_per_gpu = max(1, model.num_kv_heads // tp_size)
    return 2 * model.num_layers * heads_per_gpu * model.head_dim * model.dtype_bytes


def kv_pool_tokens(
    model: ModelSpec,
    gpu: GpuSpec,
    chunked_prefill_size: int | None = 8192,
    mem_fraction_static: float | None = None,
    tp_size: int = 1,
    override: int | None = None,
    *,
    prefill_cuda_graph: bool = True,
    runtime_overhead_gib: float = 0.0,
) -> int:
    """Tokens of the device KV pool (SGLang ``max_total_num_tokens``, page size 1).

    ``chunked_prefill_size=None`` takes SGLang's tier default for the GPU's memory.
    ``override`` mirrors ``--max-total-tokens`` (taken as is). ``runtime_overhead_gib``
    models memory already taken before weight loading (CUDA context, NCCL), which
    SGLang's profile charges as ``overhead x mem_fraction_static``.
    """
    if override is not None:
        if override <= 0:
            raise ValueError(f"kv pool override must be positive, got {override}")
        return int(override)
    if mem_fraction_static is None:
        mem_fraction_static = default_mem_fraction_static(
            gpu, chunked_prefill_size, tp_size, prefill_cuda_graph=prefill_cuda_graph
        )
    if not 0.0 < mem_fraction_static <= 1.0:
        raise ValueError(f"mem_fraction_static must be in (0, 1], got {mem_fraction_static}")
    usable = (gpu.memory_gib - runtime_overhead_gib) * GIB * mem_fraction_static
    kv_bytes = usable - model.weight_bytes / tp_size
    if kv_bytes <= 0:
        raise ValueError(
            f"{model.name} does not fit on {gpu.name}: weights {model.weight_bytes / tp_size / GIB:.1f} GiB"
            f" > static memory {usable / GIB:.1f} GiB (mem_fraction_static={mem_fraction_static})"
        )
    return int(math.floor(kv_bytes / kv_bytes_per_token(model, tp_size)))


def max_running_requests(kv_tokens: int, context_len: int, requested: int | None = None) -> int:
    """sglang ``resolve_max_num_reqs`` (no DP attention, no mamba state)."""
    if requested is not None:
        return min(max(1, requested), kv_tokens // 2)
    estimated = int(kv_tokens / context_len * 512)
    estimated = max(min(estimated, 4096), 2048)
    return min(estimated, kv_tokens // 2)


def _table() -> str:  # pragma: no cover - documentation helper
    import yaml

    from topas.engines.latency.specs import load_gpu_spec, load_model_spec, repo_conf_dir

    conf = repo_conf_dir()
    rows = ["model          GPU          mem_frac  weights_GiB  KV_GiB   KV_tokens  max_running"]
    for mpath in sorted((conf / "model").glob("*.yaml")):
        model = load_model_spec(yaml.safe_load(mpath.read_text()))
        for gpath in sorted((conf / "gpu").glob("*.yaml")):
            gpu = load_gpu_spec(yaml.safe_load(gpath.read_text()))
            frac = default_mem_fraction_static(gpu)
            try:
                tokens = kv_pool_tokens(model, gpu)
            except ValueError:
                tokens = 0
            kv_gib = tokens * model.kv_bytes_per_token / GIB
            mrr = max_running_requests(tokens, model.context_len) if tokens else 0
            rows.append(
                f"{model.name:14s} {gpu.name:12s} {frac:.3f}     {model.weight_bytes / GIB:6.2f}"
                f"      {kv_gib:7.2f}  {tokens:9,d}  {mrr}"
            )
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(_table())
