"""Where one cell's time goes, stage by stage: for each scheduler, the mean wait of each workflow stage's calls
(first admission - ready), beside the mean JCT and the makespan. It is the table the design records read to
see which calls a scheduler makes wait (docs/decisions/0022, 0028, 0029); not part of the report.

    python -m analysis.stage_waits runs/design_shapes --workload shape_d6 --load 1.1
    python -m analysis.stage_waits runs/design_shapes runs/design_myvariant --workload shape_d6 --load 1.1 \\
        --seed 100 --scheduler topas spf --value miss

`--value miss` shows each stage's uncached agent-prefix tokens per call instead (`prefix_miss`), and
`--value service` its mean service seconds. `--value engine` shows, instead of stages, what the engine did in
those runs (mean batch, cache hit rate, prefill tokens computed, bytes swapped in, preemptions, the share of
task histories left idle past the cache's turnover, the share of tasks started while a started task's call
waited, and the mean JCT split into the wait for a task's first admission and the time from then to its end;
`engine_table`): whether a scheduler's JCT comes from its order or from its throughput. A scheduler met in
several folders is labelled by its folder (by its path where two folders share a name). A selection with two
runs of one scheduler and seed (other loads, host tiers or pools under one folder) is refused, not averaged.
Stages are in the order their calls become ready within a task.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from analysis import display
from analysis.load import LoadError, config_difference, duplicate_pair, folder_labels, load_requests, load_runs, load_tasks

VALUES = {"wait": "wait_s", "miss": "prefix_miss", "service": "service_s"}  # per-stage values
# a run summary's engine figures (topas/results.py), averaged over a label's runs by `engine_table`
ENGINE = ("mean_batch_size", "cache_hit_rate", "prefill_tokens_computed", "swap_in_bytes", "preemptions")


def prefix_miss(requests: pd.DataFrame) -> pd.Series:
    """Per call, the agent-prefix tokens found in neither cache tier at its first admission. A hit covers the prompt
    from its start, which is the agent prefix, and may run on into the call's cached history: only the prefix's
    part counts, never below 0 (the device hit alone once gave -1,255 tokens on MetaGPT-TL's Architect turns)."""
    hit = requests["prefix_hit_tokens"] + (requests["host_hit_tokens"] if "host_hit_tokens" in requests else 0)
    return (requests["prefix_tokens"] - hit).clip(lower=0)


def history_outlived(requests: pd.DataFrame, pool_tokens: float, makespan_s: float) -> float:
    """The share of an agent's task histories that sit idle longer than the cache's turnover time (the pool over
    the tokens computed per second) between that agent's call in a task and the admission of its next call in the
    same task; NaN where no agent calls twice in a task. Histories an order lets outlive the turnover are the ones
    an LRU cache has likely evicted, and are computed again (docs/decisions/0044)."""
    turnover = pool_tokens / (requests["computed_tokens"].sum() / makespan_s)
    r = requests.sort_values("finish")
    previous = r.groupby(["task_id", "agent"])["finish"].shift(1)
    idle = (r["admit"] - previous).dropna()
    return float((idle > turnover).mean()) if len(idle) else float("nan")


def entries_passing(requests: pd.DataFrame) -> float:
    """The share of tasks whose first admitted call passed a waiting call of a task already started: at its
    admission some call of an earlier-started task was ready and still waiting (admitted later). A task-level
    SRPT or FCFS order never does this while the passed call fits; a scheduler that starts new tasks while
    started ones wait for memory or for their agent does (docs/decisions/0049). NaN for a run with no task."""
    r = requests[["task_id", "ready", "first_admit"]].dropna()
    start = task_starts(r)
    if start.empty:
        return float("nan")
    started = r["task_id"].map(start).to_numpy()
    ready, admitted = r["ready"].to_numpy(), r["first_admit"].to_numpy()
    t = start.to_numpy()[:, None]  # one row per task's start, one column per call
    eps = 1e-9
    passed = (started[None, :] < t - eps) & (ready[None, :] < t - eps) & (admitted[None, :] > t + eps)
    return float(passed.any(axis=1).mean())


def task_starts(requests: pd.DataFrame) -> pd.Series:
    """Each task's start: the first admission of any of its calls, by task id."""
    return requests.groupby("task_id")["first_admit"].min()


def jct_split(requests: pd.DataFrame, tasks: pd.DataFrame) -> tuple[float, float]:
    """(mean entry wait, mean time in progress) of the measured tasks (warm-up left out, as the run's mean JCT):
    arrival to the first admission of any of its calls, and from there to its end; the two add up to its JCT.
    A scheduler that starts tasks sooner without finishing them sooner moves time from the first to the second:
    by Little's law only the sum, the number of unfinished tasks, counts (docs/decisions/0050)."""
    t = tasks[~tasks["warmup"]] if "warmup" in tasks else tasks
    begun = t["task_id"].map(task_starts(requests))
    return float((begun - t["arrival"]).mean()), float((t["finish"] - begun).mean())


def stage_summary(requests: pd.DataFrame) -> pd.DataFrame:
    """One run's requests -> per stage: its calls, mean wait, service and uncached prefix tokens, and its mean
    offset from its task's first ready call (the stage order)."""
    r = requests.assign(
        wait_s=requests["first_admit"] - requests["ready"],
        prefix_miss=prefix_miss(requests),
        offset_s=requests["ready"] - requests.groupby("task_id")["ready"].transform("min"))
    return r.groupby("stage").agg(calls=("rid", "count"), wait_s=("wait_s", "mean"), service_s=("service_s", "mean"),
                                  prefix_miss=("prefix_miss", "mean"), offset_s=("offset_s", "mean"))


def _by_label(runs: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`runs` with a label column, else labelled by scheduler; a row per label: its run count as `seeds` and the
    mean of each of `columns` over its runs)."""
    runs = runs if "label" in runs else runs.assign(label=runs["scheduler"])
    return runs, runs.groupby("label", sort=False).agg(seeds=("seed", "count"), **{c: (c, "mean") for c in columns})


def stage_table(runs: pd.DataFrame, value: str = "wait_s") -> pd.DataFrame:
    """A row per `label` of `runs` (one scheduler's seeds; a label column, else the scheduler): its mean JCT and
    makespan over its runs, then `value` per stage, averaged over the runs (seeds) of the label."""
    runs, head = _by_label(runs, ["jct_mean", "makespan_s"])
    per_stage, order = [], []
    for run in runs.itertuples():
        s = stage_summary(load_requests(run.run_dir))
        per_stage.append(s[value].rename(run.label))
        order.append(s["offset_s"])
    stages = pd.concat(order, axis=1).mean(axis=1).sort_values(kind="stable").index
    by_stage = pd.concat(per_stage, axis=1).T.groupby(level=0, sort=False).mean()[list(stages)]
    return head.join(by_stage)


ORDER = ("history_outlived", "entries_passing", "entry_wait_s", "in_progress_s")  # `with_order_measures`' columns


def with_order_measures(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with the measures of each run's requests and tasks tables (ORDER): `history_outlived`,
    `entries_passing` and the two parts of `jct_split`, each table read once per run."""
    columns: dict[str, list[float]] = {c: [] for c in ORDER}
    for r in runs.itertuples():
        requests = load_requests(r.run_dir)
        entry, progress = jct_split(requests, load_tasks(r.run_dir))
        for c, v in zip(ORDER, (history_outlived(requests, r.kv_pool_tokens, r.makespan_s),
                                entries_passing(requests), entry, progress)):
            columns[c].append(v)
    return runs.assign(**columns)


def engine_table(runs: pd.DataFrame) -> pd.DataFrame:
    """A row per `label` of `runs` (as `stage_table`'s): its mean JCT, p99 JCT and makespan, then the engine figures
    of its run summaries (ENGINE) and the measures of its requests (ORDER), each averaged over the label's runs."""
    return _by_label(with_order_measures(runs), ["jct_mean", "jct_p99", "makespan_s", *ENGINE, *ORDER])[1]


def select(runs: pd.DataFrame, workload: str, load: float | None, seeds: list[int] | None,
           schedulers: list[str] | None) -> pd.DataFrame:
    """The runs of one cell: a workload, a load (None: any), some seeds and schedulers (None: all)."""
    keep = runs["workload"] == workload
    if load is not None:
        keep &= (runs["load"] - load).abs() < 1e-9
    if seeds:
        keep &= runs["seed"].isin(seeds)
    if schedulers:
        keep &= runs["scheduler"].isin(schedulers)
    return runs[keep]


def check_one_config(runs: pd.DataFrame, folder: str) -> None:
    """A LoadError where a folder's selection holds two runs of one scheduler and seed: runs of other loads, host
    tiers or pools (a regime folder holds four configs per load) would be averaged as if they were seeds."""
    pair = duplicate_pair(runs, ["scheduler", "seed"])
    if pair is not None:
        a, b = pair
        raise LoadError(f"{folder} holds several runs of {a['scheduler']} seed {a['seed']} ({a['run_dir']} and "
                        f"{b['run_dir']} differ in {config_difference(a['run_dir'], b['run_dir'])}): pass --load, "
                        "or one config's folder")


def label_by_folder(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The folders' runs together, each labelled by its scheduler, or `scheduler (folder)` where a scheduler
    appears in more than one folder (a variant of it)."""
    seen: dict[str, int] = {}
    for df in frames.values():
        for s in set(df["scheduler"]):
            seen[s] = seen.get(s, 0) + 1
    return pd.concat([df.assign(label=[s if seen[s] == 1 else f"{s} ({name})" for s in df["scheduler"]])
                      for name, df in frames.items()], ignore_index=True)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m analysis.stage_waits", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="runs folders (every complete run under each is read)")
    ap.add_argument("--workload", required=True, help="the workload name, e.g. shape_d6 or metagpt_tl")
    ap.add_argument("--load", type=float, help="the load (x capacity); default: any")
    ap.add_argument("--seed", type=int, nargs="*", help="seeds to average over; default: all")
    ap.add_argument("--scheduler", nargs="*", help="schedulers to show; default: all")
    ap.add_argument("--value", choices=sorted([*VALUES, "engine"]), default="wait",
                    help="what each stage column shows; engine: the runs' engine figures instead of stages")
    args = ap.parse_args(argv)
    try:
        frames = {name: select(load_runs(d), args.workload, args.load, args.seed, args.scheduler)
                  for name, d in zip(folder_labels(args.folders), args.folders)}
        frames = {k: v for k, v in frames.items() if len(v)}
        for name, runs in frames.items():
            check_one_config(runs, name)
        if not frames:
            sys.exit(f"error: no complete run of workload {args.workload}"
                     + (f" at load {args.load:g}" if args.load is not None else "") + " under " + ", ".join(args.folders))
        labelled = label_by_folder(frames)
        table = (_engine_display(engine_table(labelled)) if args.value == "engine"
                 else stage_table(labelled, VALUES[args.value]).round(1))
    except LoadError as e:
        sys.exit(f"error: {e}")
    print(display.to_markdown(table.reset_index().rename(columns={"label": "scheduler"})))


def _engine_display(table: pd.DataFrame) -> pd.DataFrame:
    """Readable units: the hit rate to 3 digits, prefill tokens in thousands, bytes swapped in GB."""
    out = table.assign(prefill_tokens_computed=table["prefill_tokens_computed"] / 1e3,
                       swap_in_bytes=table["swap_in_bytes"] / 1e9)
    out = out.rename(columns={"prefill_tokens_computed": "prefill_k_tokens", "swap_in_bytes": "swap_in_GB"})
    return out.round(1).assign(cache_hit_rate=table["cache_hit_rate"].round(3),
                               history_outlived=table["history_outlived"].round(3),
                               entries_passing=table["entries_passing"].round(3))


if __name__ == "__main__":
    main(sys.argv[1:])
