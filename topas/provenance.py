"""What a run's results depend on, as a fingerprint stored in its summary.json.

A resumed sweep skips a run folder only when it is complete *and* was made by the same
code and the same resolved config; a folder left by older code (a simulator fix, a tuned
default, a new capacity file) is run again instead of being silently mixed into new
tables. Code = every source and data file of the `topas` and `baselines` packages.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("topas", "baselines")
_SUFFIXES = {".py", ".yaml", ".yml", ".json"}
# config keys that do not change a run's results
_IGNORED_KEYS = ("logger", "progress", "out_dir", "run_subdir", "experiment_name")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*")):
            if f.suffix in _SUFFIXES and f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def run_fingerprint(config: Mapping[str, Any]) -> str:
    """Code fingerprint + the resolved config (a plain mapping) without output-only keys."""
    cfg = {k: v for k, v in config.items() if k not in _IGNORED_KEYS}
    blob = json.dumps(cfg, sort_keys=True, default=str)
    return hashlib.sha256(f"{code_fingerprint()}|{blob}".encode()).hexdigest()[:16]
