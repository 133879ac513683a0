"""What makes two runs the same: the run folder's name and the fingerprint in its summary.

A run's folder is a function of everything that changes its result:
`runs/<experiment>/<workload>/<scheduler>/<load>/seed<seed>-<config hash>`, where the
readable levels are for people and the hash (of the whole resolved config, output-only
keys left out) keeps two configs apart that the readable levels do not (a parameter sweep,
another GPU, another trace file). The summary's fingerprint (topas/fingerprint.py) adds the code
the run executes: a sweep skips a folder only when code and config are the same, and re-runs it in
place otherwise.

A run's identity also covers the content of every file it reads (`input_files`: a replayed trace,
a measured latency profile, the capacity files a `load` is read from), so a file edited in place
re-runs the runs that read it although its path, and so the folder, stay the same.

The resolvers below are used by conf/config.yaml (registered on import).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]  # the checkout, as topas/imports.py finds it
# config keys that say where and how a run is written or shown, not what it computes
OUTPUT_ONLY_KEYS = frozenset({"hydra", "logger", "progress", "out_dir", "run_subdir", "experiment_name", "sweep_manifest"})


def config_hash(config: Mapping[str, Any], n: int = 8) -> str:
    """Hash of a resolved config (a plain mapping) without its output-only keys."""
    cfg = {k: v for k, v in config.items() if k not in OUTPUT_ONLY_KEYS}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:n]


def input_files(config: Mapping[str, Any]) -> list[Path]:
    """The files a run reads besides the code: a `trace` workload's file, a latency profile, and the
    capacity files (topas.workloads.capacity) when `workload.load` sets the rate."""
    import os

    w, b = config.get("workload") or {}, config.get("backend") or {}
    files = []
    if w.get("generator") == "trace" and isinstance((w.get("params") or {}).get("path"), str):
        files.append(Path(os.path.expanduser(w["params"]["path"])))
    if isinstance(b.get("latency_profile"), str) and b.get("latency") in (None, "profile"):
        files.append(Path(os.path.expanduser(b["latency_profile"])))
    if w.get("load") is not None and w.get("arrival_rate") is None:
        from topas.workloads.capacity import CAPACITY_FILE, capacity_file

        model, gpu = (config.get("model") or {}).get("name"), (config.get("gpu") or {}).get("name")
        files += [CAPACITY_FILE] + ([capacity_file(model, gpu)] if model and gpu else [])
    return files


def _name(f: Path, root: Path) -> str:
    """A file of the checkout by its path inside it: the same run in a checkout at another path (a clone, a
    worktree) has the same fingerprint. A file outside keeps its path (the config names it anyway)."""
    try:
        return Path(f).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(f)


def content_digest(files: list[Path], root: Path = ROOT) -> str:
    """Digest of the files' content (a missing or unreadable file counts as such, not as an error:
    validation reports it)."""
    h = hashlib.sha256()
    for f in files:
        name = _name(f, root)
        try:
            h.update(f"{name}\0".encode() + hashlib.sha256(f.read_bytes()).digest())
        except OSError as e:
            h.update(f"{name}\0{type(e).__name__}".encode())
    return h.hexdigest()


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def rate_tag(load: Any, rate: Any, capacity: float | None) -> str:
    """Folder level of the offered load: `load0.7_rate0.1152` (the rate actually used),
    `rate0.08`, or `trace-times`. Never raises: bad values are reported by validation."""
    if load is not None:
        lv = _number(load)
        if lv is None:
            return f"load{load}"
        return f"load{lv:g}_rate{lv * capacity:.4g}" if capacity else f"load{lv:g}"
    if rate is not None:
        rv = _number(rate)
        return f"rate{rv:g}" if rv is not None else f"rate{rate}"
    return "trace-times"


def _rate_tag_resolver(*, _root_: DictConfig) -> str:
    w = _root_.workload
    load, rate = w.get("load"), w.get("arrival_rate")
    capacity = None
    if _number(load) is not None and rate is None:
        from topas.workloads import capacity_of

        capacity = capacity_of(w.get("name"), _root_.model.get("name"), _root_.gpu.get("name"))
    return rate_tag(load, rate, capacity)


def _config_hash_resolver(*, _root_: DictConfig) -> str:
    plain = {}
    for k in _root_:
        if k in OUTPUT_ONLY_KEYS:
            continue
        node = _root_._get_node(k)
        plain[k] = OmegaConf.to_container(node, resolve=True) if isinstance(node, Container) else _root_[k]
    return config_hash(plain)


def _rate_unless_load(default: Any, *, _parent_: DictConfig) -> Any:
    """A workload's default arrival rate gives way to a `load` set on the command line, so
    `workload.load=0.7` alone works; setting both is rejected by validation."""
    return None if _parent_.get("load") is not None else default


OmegaConf.register_new_resolver("rate_tag", _rate_tag_resolver, replace=True)
OmegaConf.register_new_resolver("config_hash", _config_hash_resolver, replace=True)
OmegaConf.register_new_resolver("rate_unless_load", _rate_unless_load, replace=True)
