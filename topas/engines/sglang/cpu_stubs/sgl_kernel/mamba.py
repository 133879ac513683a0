"""Stand-in for `sgl_kernel.mamba` (CPU install): placeholders only."""

from sgl_kernel import _placeholder


def __getattr__(name: str):
    if name.endswith("_cpu"):
        return _placeholder(f"mamba.{name}")
    raise AttributeError(f"module 'sgl_kernel.mamba' (topas CPU stand-in) has no attribute '{name}'")
