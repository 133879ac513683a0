"""What makes two runs the same: the run folder's name and the fingerprint in its summary.

A run's folder is a function of everything that changes its result:
`runs/<experiment>/<workload>/<scheduler>/<load>/seed<seed>-<config hash>`, where the
readable levels are for people and the hash (of the whole resolved config, output-only
keys left out) keeps two configs apart that the readable levels do not (a parameter sweep,
another GPU, another trace file). The summary's fingerprint adds the code: a sweep skips a
folder only when code and config are the same, and re-runs it in place otherwise.

The code is every source and data file of `topas` and `baselines` but the policy packages the
run's scheduler does not come from: a change to TOPAS (`topas/scheduler/`) re-runs the TOPAS runs
only, a change to a baseline the baseline runs only. This holds because no policy package imports
another (tests/test_run_identity.py checks the imports); the engines, workloads and policy API are
shared and in every run's fingerprint.

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
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("topas", "baselines")
# policy package (module name) -> its folder; a run's fingerprint leaves out the ones its policy is not from
POLICY_PACKAGES = {"topas.scheduler": "topas/scheduler", "baselines": "baselines"}
_SUFFIXES = {".py", ".yaml", ".yml", ".json"}
# config keys that say where and how a run is written or shown, not what it computes
OUTPUT_ONLY_KEYS = frozenset({"hydra", "logger", "progress", "out_dir", "run_subdir", "experiment_name", "sweep_manifest"})


def config_hash(config: Mapping[str, Any], n: int = 8) -> str:
    """Hash of a resolved config (a plain mapping) without its output-only keys."""
    cfg = {k: v for k, v in config.items() if k not in OUTPUT_ONLY_KEYS}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:n]


@lru_cache(maxsize=None)
def code_fingerprint(policy_package: str | None = None) -> str:
    """Every source and data file of the `topas` and `baselines` packages; with `policy_package` (a key of
    POLICY_PACKAGES), less the other policy packages."""
    skip = [ROOT / d for m, d in POLICY_PACKAGES.items() if policy_package is not None and m != policy_package]
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*")):
            if f.suffix in _SUFFIXES and f.is_file() and "__pycache__" not in f.parts and not any(f.is_relative_to(d) for d in skip):
                h.update(str(f.relative_to(ROOT)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def policy_package(scheduler: str) -> str | None:
    """The policy package (a key of POLICY_PACKAGES) a registered scheduler comes from; None for any other
    (a policy registered at run time, e.g. by a test, or an unknown name): its run's fingerprint then takes every package."""
    from topas.policy.registry import UnknownPolicyError, policy_class

    try:
        module = policy_class(scheduler).__module__
    except UnknownPolicyError:  # a config error, reported by validation
        return None
    return next((m for m in POLICY_PACKAGES if module == m or module.startswith(m + ".")), None)


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


def content_digest(files: list[Path]) -> str:
    """Digest of the files' content (a missing or unreadable file counts as such, not as an error:
    validation reports it)."""
    h = hashlib.sha256()
    for f in files:
        try:
            h.update(f"{f}\0".encode() + hashlib.sha256(f.read_bytes()).digest())
        except OSError as e:
            h.update(f"{f}\0{type(e).__name__}".encode())
    return h.hexdigest()


def run_fingerprint(config: Mapping[str, Any]) -> str:
    """Code fingerprint (scoped to the run's policy package) + config hash + the content of the files it reads:
    a complete folder with another fingerprint is re-run."""
    scheduler = (config.get("scheduler") or {}).get("name")
    package = policy_package(scheduler) if isinstance(scheduler, str) else None
    key = f"{code_fingerprint(package)}|{config_hash(config, 64)}"
    files = input_files(config)
    if files:  # runs that read no file keep the fingerprint they always had
        key += f"|{content_digest(files)}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


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
