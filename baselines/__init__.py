"""Baseline scheduling policies, one module per baseline, each registered by name.

Every module names the source it follows (paper section / SGLang file) and any deviation."""

from baselines import (  # noqa: F401  (import registers the policies)
    autellix_las,
    continuum_ttl,
    dfs_weight,
    fcfs,
    kvflow,
    lpm,
    parrot_fcfs,
    phase_batch,
    spf,
)
