"""A run's fingerprint: its config hash (topas.run_identity) and the code it executes, so a sweep re-runs a
complete run folder exactly when its result could differ.

The code of a run is found from the import graph (topas.imports, read from the sources):
- the runner (`topas.runner`) and every module it imports, lazy imports included;
- its engine's package (`topas/engines/<backend>/`, from its registration in topas.config.BACKENDS), whole: a
  real engine's server plugin runs in another process, not through an import;
- its scheduler's policy package (`topas/scheduler/` or `baselines/`), whole;
- every module those import, the packages above each, and the data files (.json, .yaml) beside them.

Nothing else is in it: an edit to analysis/, docs/, conf/ (the config hash covers a run's config), a driver
(reproduce, sweep, tuning, fidelity), another engine or another policy package re-runs nothing. This holds
because no policy package imports another and no engine imports a driver (tests/test_imports.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from topas import imports
from topas.run_identity import config_hash, content_digest, input_files

ROOT = imports.ROOT
RUNNER = "topas.runner"
POLICY_PACKAGES = ("topas.scheduler", "baselines")
_DATA = {".json", ".yaml", ".yml"}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def policy_package(scheduler: str) -> str | None:
    """The policy package a registered scheduler comes from; None for any other (a policy registered at run
    time, e.g. by a test, or an unknown name): its run's fingerprint then takes every policy package."""
    from topas.policy.registry import UnknownPolicyError, policy_class

    try:
        module = policy_class(scheduler).__module__
    except UnknownPolicyError:  # a config error, reported by validation
        return None
    return next((p for p in POLICY_PACKAGES if _under(module, p)), None)


def engine_package(backend: str) -> str | None:
    """The package of a registered backend's engine (`topas.engines.<name>`); None for an unknown backend."""
    from topas.config import BACKENDS

    if backend not in BACKENDS:
        return None
    module = BACKENDS[backend].run.split(":")[0]
    parts = module.split(".")
    return ".".join(parts[:3]) if module.startswith("topas.engines.") else ".".join(parts[:-1])


def entries(backend: str | None, scheduler: str | None) -> tuple[str, ...]:
    """The packages a run executes besides the runner: its engine's and its policy's (every one when unknown)."""
    engine = engine_package(backend) if isinstance(backend, str) else None
    policy = policy_package(scheduler) if isinstance(scheduler, str) else None
    return (RUNNER, engine or "topas.engines", *([policy] if policy else POLICY_PACKAGES))


def _files(modules: Iterable[str], root: Path) -> list[Path]:
    """The source files of `modules` and the data files beside them (in their folders and the folders below
    those that are not packages)."""
    paths = imports.modules(root, ("topas", "baselines"))
    out, folders = set(), set()
    for m in modules:
        out.add(paths[m])
        folders.add(paths[m].parent)
    for d in folders:
        stack = [d]
        while stack:
            f = stack.pop()
            for p in f.iterdir():
                if p.is_dir() and p.name != "__pycache__" and not (p / "__init__.py").exists():
                    stack.append(p)
                elif p.is_file() and p.suffix in _DATA:
                    out.add(p)
    return sorted(out)


@cache
def code_modules(packages: tuple[str, ...], root: Path = ROOT) -> frozenset[str]:
    """Every module of `packages` and what importing them may execute."""
    known = imports.modules(root, ("topas", "baselines"))
    start = [m for m in known if any(_under(m, p) for p in packages)]
    return frozenset(imports.reachable(start, root))


@cache
def code_fingerprint(packages: tuple[str, ...], root: Path = ROOT) -> str:
    """Digest of the files of the code `packages` execute (`code_modules`): their paths and bytes."""
    h = hashlib.sha256()
    for f in _files(code_modules(packages, root), root):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def clear_caches() -> None:
    code_modules.cache_clear()
    code_fingerprint.cache_clear()
    imports.clear_cache()


def run_fingerprint(config: Mapping[str, Any], root: Path = ROOT) -> str:
    """Code fingerprint (the code the run executes) + config hash + the content of the files it reads: a
    complete folder with another fingerprint is re-run."""
    packages = entries((config.get("backend") or {}).get("name"), (config.get("scheduler") or {}).get("name"))
    key = f"{code_fingerprint(packages, root)}|{config_hash(config, 64)}"
    files = input_files(config)
    if files:  # runs that read no file keep the fingerprint they always had
        key += f"|{content_digest(files)}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]
