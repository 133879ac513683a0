"""TOPAS itself, as one decision pipeline (topas.py; docs/topas.md, "The pipeline"): estimates (estimates.py),
the per-task path model (progress.py, tasks.py, digest.py), the search problem (problem.py, build.py), the
score (score.py), the search over candidate states (search.py, pack.py, repair.py), the admission order
(ordering.py), the pins (pins.py), and the paper's ablations (ablations.py)."""

from topas.scheduler import ablations, topas  # noqa: F401  (importing registers topas and its ablations)
