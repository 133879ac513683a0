"""The resolved config of every job of every experiment grid, as a hash: a refactor that must not change
any run's identity (topas/run_identity.py) is checked by running this before and after and comparing.

    python scripts/config_identity.py dump before.json        # on the old code
    python scripts/config_identity.py dump after.json         # on the new code
    python scripts/config_identity.py compare before.json after.json
    python scripts/config_identity.py dump quick.json quick,default     # some grids only
    python scripts/config_identity.py compare before.json quick.json common   # the grids both hold

Each job is composed as `topas.reproduce` composes it (its sweep overrides, expanded by `topas.sweep.expand`);
its value is `topas.run_identity.config_hash` of the whole resolved config and its run folder (`run_subdir`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GRIDS = ("quick", "default", "full", "real")


def _jobs(grids: tuple[str, ...] = GRIDS) -> dict[str, list[list[str]]]:
    from topas.reproduce import EXPERIMENTS, grid_config, sweep_overrides
    from topas.sweep import expand

    out = {}
    for grid in grids:
        for exp in EXPERIMENTS:
            try:
                grid_config(exp, grid)
            except ValueError:
                continue  # no such grid for this experiment
            ov = sweep_overrides(exp, grid, "sim", [], Path("/tmp/runs"))
            out[f"{exp}/{grid}"] = expand(ov)
    return out


def dump(path: str, grids: str = ",".join(GRIDS)) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import topas.config  # noqa: F401  (resolvers)
    from topas.run_identity import config_hash
    from topas.sweep import CONF_DIR

    result: dict[str, dict[str, str]] = {}
    jobs = _jobs(tuple(grids.split(",")))  # expand opens its own Hydra context: before ours
    with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
        for name, grid_jobs in jobs.items():
            for job in grid_jobs:
                cfg = compose(config_name="config", overrides=list(job))
                plain = OmegaConf.to_container(cfg, resolve=True)
                key = " ".join(sorted(o for o in job if not o.startswith("hydra.sweep.dir")))
                result.setdefault(name, {})[key] = f"{config_hash(plain, 64)} {plain['run_subdir']}"
            print(f"{name}: {len(grid_jobs)} jobs", file=sys.stderr, flush=True)
    Path(path).write_text(json.dumps(result, indent=0, sort_keys=True))


def compare(a: str, b: str, only_common: bool = False) -> int:
    old, new = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    bad = 0
    for grid in sorted(set(old) & set(new)) if only_common else sorted(set(old) | set(new)):
        o, n = old.get(grid, {}), new.get(grid, {})
        if set(o) != set(n):
            bad += 1
            print(f"{grid}: jobs differ: {len(set(o) - set(n))} only before, {len(set(n) - set(o))} only after")
        diff = [k for k in set(o) & set(n) if o[k] != n[k]]
        bad += len(diff)
        print(f"{grid}: {len(set(o) & set(n))} jobs compared, {len(diff)} configs differ" + (f", e.g. {diff[0]}" if diff else ""))
    print(f"total: {sum(len(v) for v in old.values())} jobs before, {sum(len(v) for v in new.values())} after; "
          f"{'IDENTICAL' if not bad else f'{bad} DIFFERENCES'}")
    return 1 if bad else 0


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    sys.exit(dump(*args) or 0 if cmd == "dump" else compare(args[0], args[1], only_common=args[2:] == ["common"]))
