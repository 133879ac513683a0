"""Stand-in for `sgl_kernel` on a CPU-only sglang 0.5.23 install (see ../README.md).

Only `assign_req_to_token_pool_cpu` is implemented (plain torch); any other `*_cpu`
name sglang imports resolves to a placeholder that raises when called, so a code
path that really needs a native kernel fails loudly instead of computing garbage.
"""

from __future__ import annotations

import torch

__version__ = "0.0.0+topas.cpu.stub"
TOPAS_CPU_STUB = True


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV locations into its row of `req_to_token`.

    Request i owns row `req_pool_indices[i]`, columns `[start_offset[i], end_offset[i])`;
    its locations are the next `end - start` entries of `out_cache_loc` (requests are
    concatenated in batch order), as in sglang's triton kernel `assign_req_to_token_pool`.
    """
    del pool_len  # the row length; implied by req_to_token's shape
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, s, e in zip(rows, starts, ends):
        n = e - s
        if n > 0:
            req_to_token[row, s:e] = out_cache_loc[pos : pos + n].to(req_to_token.dtype)
        pos += n


def _placeholder(name: str):
    def _missing(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} is not available: this is the CPU stand-in shipped by "
            "topas (topas/engines/sglang/cpu_stubs); only assign_req_to_token_pool_cpu is implemented"
        )

    _missing.__name__ = name
    return _missing


def __getattr__(name: str):
    if name.endswith("_cpu"):
        fn = _placeholder(name)
        globals()[name] = fn
        return fn
    raise AttributeError(f"module 'sgl_kernel' (topas CPU stand-in) has no attribute '{name}'")
