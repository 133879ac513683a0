"""TOPAS itself: the task progress model (progress.py), the score terms (score.py), the
search over post-decision states (search.py) and the policy wiring them (topas.py)."""

from topas.scheduler import topas  # noqa: F401  (import registers topas and its ablations)
