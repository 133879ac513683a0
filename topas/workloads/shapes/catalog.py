"""Shape ids and the two samples of the family (docs/protocol.md, "Design and evaluation samples").

    d<k>   the design sample: develop and tune schedulers on these (with the tuning seeds)
    e<k>   the evaluation sample: run only for the report, never to choose a rule or a value

k = 0, 1, 2, ... The letter is part of the id that seeds the shape (spec.py), so the two samples are
disjoint by construction, and the k-th shapes of both samples have the same structure.
"""

from __future__ import annotations

import re

SAMPLES = {"design": "d", "evaluation": "e"}
_ID = re.compile(r"^([de])(0|[1-9][0-9]{0,5})$")


def parse_id(shape_id: str) -> tuple[str, int]:
    """(sample name, index) of a shape id; a one-line ValueError for anything else."""
    m = _ID.match(shape_id) if isinstance(shape_id, str) else None
    if m is None:
        raise ValueError(f"workload.params.shape: {shape_id!r} is not a shape id (d<k> for the design sample, "
                         "e<k> for the evaluation sample, k = 0, 1, ...)")
    sample = next(name for name, letter in SAMPLES.items() if letter == m.group(1))
    return sample, int(m.group(2))


def sample_ids(sample: str, n: int, start: int = 0) -> list[str]:
    """The ids of n consecutive shapes of a sample (`design` or `evaluation`)."""
    if sample not in SAMPLES:
        raise ValueError(f"unknown shape sample {sample!r}; known: {sorted(SAMPLES)}")
    return [f"{SAMPLES[sample]}{k}" for k in range(start, start + n)]


def workload_name(shape_id: str) -> str:
    """The workload name of a shape (run folders, capacity table): `shape_<id>`."""
    return f"shape_{shape_id}"
