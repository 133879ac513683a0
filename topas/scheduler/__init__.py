"""TOPAS itself: the task progress model (progress.py), the score terms (score.py), the
search over post-decision states (search.py) the policy wiring them (topas.py) and its ablations (ablations.py)."""

from topas.scheduler import ablations, topas  # noqa: F401  (importing registers topas and its ablations)
