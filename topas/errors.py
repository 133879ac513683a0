"""One-line error messages from Hydra / OmegaConf / our own exceptions."""

from __future__ import annotations

_NOISE = ("full_key", "object_type", "provider=", "Config search path", "Set the environment variable")


def one_line(e: BaseException) -> str:
    """Hydra/OmegaConf errors span several lines; keep the informative ones on one."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip() and not ln.strip().startswith(_NOISE)]
    if not lines:
        return type(e).__name__
    if any(ln.startswith("Available options") for ln in lines):
        i = next(i for i, ln in enumerate(lines) if ln.startswith("Available options"))
        return f"{' '.join(lines[:i])}; available: {', '.join(lines[i + 1:])}"
    return "; ".join(lines)
