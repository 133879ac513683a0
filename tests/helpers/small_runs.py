"""A small run set for every analysis experiment, made in-process with the simulator (a few
seconds): the folders look like the sweeps' (runs/<experiment>/<run_subdir>/) without a sweep
plan, so analysis/load.py reads every complete folder."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = ["logger=none", "progress=false", "backend.latency=roofline"]  # roofline: no latency-model start-up
# experiment -> list of override sets (one run each): two schedulers, two seeds, few tasks
SMALL = {
    "main": [[f"workload={w}", f"scheduler={s}", f"seed={k}", "workload.num_tasks=8"]
             for w, scheds in (("dag4", ("fcfs", "topas")), ("metagpt_tl", ("spf", "topas")))
             for s in scheds for k in (0, 1)],
    "load_sweep": [["workload=dag4", f"workload.load={ld}", f"scheduler={s}", "workload.num_tasks=8"]
                   for ld in (0.5, 0.8) for s in ("fcfs", "topas")],
    "kv_budget": [["workload=dag4", f"backend.kv_pool_tokens={kv}", f"scheduler={s}", "workload.num_tasks=8"]
                  for kv in (16000, 30000) for s in ("fcfs", "topas")],
    "ablation": [["workload=metagpt_tl", f"scheduler={s}", f"seed={k}", "workload.num_tasks=4"]
                 for s in ("topas_base", "topas") for k in (0, 1)],
    "overhead": [["workload=metagpt_sop", f"+rate_point={p}", "scheduler=topas", "workload.num_tasks=6"]
                 for p in ("paper", "load")],
    "motivation": [[f"workload={w}", "scheduler=fcfs", f"seed={k}", "workload.num_tasks=10"]
                   for w in ("motivation_alternating", "motivation_grouped") for k in (0, 1)],
    "regime": [["+regime_point=dag4_load0.5", f"backend.host_cache_ratio={h}", f"scheduler={s}", f"seed={k}",
                "workload.num_tasks=5"] for h in ("2.0", "0") for s in ("parrot_fcfs", "topas") for k in (0, 1)],
}


def make_small_runs(runs: Path, experiments=tuple(SMALL)) -> Path:
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)
    from topas.runner import run

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        for exp in experiments:
            for ov in SMALL[exp]:
                cfg = compose(config_name="config", overrides=[f"+experiment={exp}", *BASE, *ov])
                run(cfg, out_dir=runs / exp / cfg.run_subdir, quiet=True)
    return runs


def shared_small_runs(tmp_path_factory) -> Path:
    """The small run set, made once per test session (modules share pytest's base temp folder)."""
    runs = tmp_path_factory.getbasetemp() / "small_runs"
    done = runs / ".complete"
    if not done.exists():
        make_small_runs(runs)
        done.touch()
    return runs
