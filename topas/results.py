"""Run outputs: per-task / per-request / timeline tables, the summary, atomic writes.

Every engine (simulator, real SGLang) produces a `RunRecord` whose tables are built by
`task_table`, `request_table` and `timeline_table` from rows keyed by the columns declared
once below (`TASKS`, `REQUESTS`, `TIMELINE`: name, dtype, meaning), so both engines' tables
have exactly the same columns and `analysis/` treats them alike. Units: seconds, tokens, bytes.

tasks.parquet, requests.parquet, timeline.parquet
    the columns of `TASKS`, `REQUESTS`, `TIMELINE` (one row per task, per call, per engine
    iteration or decode stretch), in that order
summary.json (written last: the completion marker)
    see `summarize`; also the run's fingerprint (code + config), `files`, the digest of
    every other output, and `digest`, its own (`summary_digest`), both checked by `is_complete`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Column:
    """One column of a run table."""

    name: str
    dtype: str  # its pandas dtype: "int64", "float64", "str" or "bool"
    meaning: str
    nullable: bool = False  # NaN where an engine does not observe it (an int64 column is then float64 there)
    from_engine: bool = True  # False: set here from the engine's columns (`warmup`)


@dataclass(frozen=True)
class Table:
    """A run table: its file and its columns, in order."""

    file: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def frame(self, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
        """The table from an engine's rows, each keyed by exactly the columns an engine gives
        (ValueError naming the missing or unknown keys otherwise)."""
        given = [c.name for c in self.columns if c.from_engine]
        rows = list(rows)
        for row in rows:
            if row.keys() != set(given):
                missing, unknown = sorted(set(given) - row.keys()), sorted(row.keys() - set(given))
                raise ValueError(f"{self.file}: a row's columns differ from the declared ones "
                                 f"(missing {missing}, unknown {unknown})")
        return pd.DataFrame(rows, columns=given)

    def mismatches(self, df: pd.DataFrame, nan_for_unobserved: bool = True) -> list[str]:
        """How `df` departs from the declared columns (names, order, dtypes); empty if it does not.
        `nan_for_unobserved`: a nullable int64 column may be float64 (an engine that writes NaN)."""
        if list(df.columns) != self.names:
            return [f"{self.file}: columns {list(df.columns)}, declared {self.names}"]
        out = []
        for c in self.columns:
            got = df[c.name].dtype
            ok = pd.api.types.is_string_dtype(got) if c.dtype == "str" else str(got) == c.dtype
            if not ok and not (nan_for_unobserved and c.nullable and c.dtype == "int64" and str(got) == "float64"):
                out.append(f"{self.file}: column {c.name} is {got}, declared {c.dtype}")
        return out


TASKS = Table("tasks.parquet", (
    Column("task_id", "int64", "the task's id in the trace"),
    Column("template", "str", "its workflow template"),
    Column("arrival", "float64", "arrival time (s)"),
    Column("finish", "float64", "finish of its last call (s)"),
    Column("jct", "float64", "job completion time: finish - arrival (s)"),
    Column("num_calls", "int64", "calls (LLM requests) in its workflow"),
    Column("warmup", "bool", "among the first `warmup_fraction` of tasks by arrival: left out of the JCT "
           "figures (set by `task_table`)", from_engine=False),
    Column("bound_s", "float64", "the task's JCT floor: its batch-1 critical path on the run's latency model "
           "(topas/bound.py; NaN where the run has none)", nullable=True, from_engine=False),
    Column("jct_over_bound", "float64", "jct / bound_s: how far the schedule left the task from the limit",
           nullable=True, from_engine=False),
))
REQUESTS = Table("requests.parquet", (
    Column("rid", "str", "the request's id"),
    Column("task_id", "int64", "its task"),
    Column("node", "str", "its call node in the task's workflow"),
    Column("agent", "str", "the agent whose prefix its prompt starts with"),
    Column("stage", "str", "its stage in the workflow template"),
    Column("ready", "float64", "entered the engine's queue (its dependencies done) (s)"),
    Column("first_admit", "float64", "first admission to a batch (s)", nullable=True),
    Column("admit", "float64", "last admission (s): later than first_admit after a preemption", nullable=True),
    Column("first_token", "float64", "first output token (s); real engine: end of the prefill iteration that "
           "produced it (iteration log), or the first streamed token", nullable=True),
    Column("finish", "float64", "last output token (s); real engine: the answer received"),
    Column("prompt_tokens", "int64", "prompt length"),
    Column("prefix_tokens", "int64", "its agent's shared prefix"),
    Column("output_tokens", "int64", "tokens generated"),
    Column("prefix_hit_tokens", "int64", "prompt tokens cached on the device at first admission; real engine: "
           "SGLang's device `cached_tokens`, accumulated over re-admissions after a retraction"),
    Column("host_hit_tokens", "int64", "prompt tokens loaded back from the host tier (HiCache)"),
    Column("computed_tokens", "int64", "prefill tokens computed, recompute included; real engine: prompt - "
           "cached, recompute after a retraction not observable"),
    Column("preemptions", "int64", "retractions + policy preemptions; real engine: SGLang's `num_retractions` "
           "(the plugin's preemptions requeue through the same path)"),
    Column("service_s", "float64", "time in service (s): simulator: the iterations it took part in; real engine: "
           "first admission -> answer (time requeued after a preemption included)", nullable=True),
))
TIMELINE = Table("timeline.parquet", (
    Column("start", "float64", "start of the iteration or decode stretch (s)"),
    Column("duration", "float64", "its duration, every step of a stretch (s)"),
    Column("kind", "str", "prefill | decode"),
    Column("steps", "int64", "decode iterations in the stretch (1 for a prefill)"),
    Column("batch_size", "int64", "requests in the batch"),
    Column("tokens", "int64", "prefill: the batch's cached + computed context after it; decode: mean context "
           "per request at the stretch start", nullable=True),
    Column("kv_used_tokens", "int64", "KV pool tokens in use after it", nullable=True),
    Column("tree_tokens", "int64", "tokens of the radix tree on the device", nullable=True),
    Column("evictable_tokens", "int64", "tree tokens no running request holds", nullable=True),
    Column("host_tokens", "int64", "tokens in the host tier (NaN without one, real engine)", nullable=True),
    Column("resident_prefixes", "int64", "agent prefixes fully on the device (real engine: at the latest "
           "decision, NaN before the first)", nullable=True),
    Column("waiting", "int64", "requests waiting after it", nullable=True),
    Column("running", "int64", "requests running after it", nullable=True),
))
OUTPUT_FILES = ("config.yaml", "tasks.parquet", "requests.parquet", "timeline.parquet", "summary.json")


@dataclass
class RunRecord:
    tasks: pd.DataFrame
    requests: pd.DataFrame
    timeline: pd.DataFrame
    engine: dict[str, Any] = field(default_factory=dict)  # engine counters (decisions, swaps, ...)
    decision_wall_s: list[float] = field(default_factory=list)


def mark_warmup(tasks: pd.DataFrame, warmup_fraction: float) -> pd.DataFrame:
    tasks = tasks.sort_values(["arrival", "task_id"]).reset_index(drop=True)
    n_warm = int(len(tasks) * warmup_fraction)
    tasks["warmup"] = np.arange(len(tasks)) < n_warm
    return tasks


def task_table(rows: Iterable[Mapping[str, Any]], warmup_fraction: float) -> pd.DataFrame:
    """tasks.parquet: `TASKS` from an engine's rows (`warmup` set here; the bound columns NaN until the
    runner fills them in after the run, topas/bound.py)."""
    return mark_warmup(TASKS.frame(rows), warmup_fraction).assign(bound_s=np.nan, jct_over_bound=np.nan)


def request_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """requests.parquet: `REQUESTS` from an engine's rows, by task, then ready time."""
    return REQUESTS.frame(rows).sort_values(["task_id", "ready", "rid"], kind="stable").reset_index(drop=True)


def timeline_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """timeline.parquet: `TIMELINE` from an engine's rows, in their order."""
    return TIMELINE.frame(rows)


def percentile(x: np.ndarray, q: float) -> float:
    """The q-th percentile (NaN for no values)."""
    return float(np.percentile(x, q)) if len(x) else float("nan")


def summarize(rec: RunRecord, sim_wall_s: float | None = None) -> dict[str, Any]:
    t = rec.tasks
    steady = t[~t["warmup"]]
    jct = steady["jct"].to_numpy(dtype=float)
    span = float(t["finish"].max() - t["arrival"].min()) if len(t) else float("nan")
    r = rec.requests
    tl = rec.timeline
    dec = tl[tl["kind"] == "decode"]
    steps = dec["steps"].sum()
    dw = np.asarray(rec.decision_wall_s, dtype=float)
    makespan = float(tl["start"].iloc[-1] + tl["duration"].iloc[-1]) if len(tl) else span
    out: dict[str, Any] = {
        "num_tasks": int(len(t)),
        "num_tasks_measured": int(len(steady)),
        "jct_mean": float(jct.mean()) if len(jct) else float("nan"),
        "jct_p50": percentile(jct, 50),
        "jct_p90": percentile(jct, 90),
        "jct_p99": percentile(jct, 99),
        "jct_max": float(jct.max()) if len(jct) else float("nan"),
        "throughput_tasks_per_s": len(t) / span if span > 0 else float("nan"),
        "throughput_requests_per_s": len(r) / span if span > 0 else float("nan"),
        "makespan_s": makespan,
        "cache_hit_rate": float(r["prefix_hit_tokens"].sum() / max(r["prompt_tokens"].sum(), 1)),
        "prefill_tokens_computed": int(r["computed_tokens"].sum()),
        "preemptions": int(r["preemptions"].sum()),
        "mean_batch_size": float((dec["batch_size"] * dec["steps"]).sum() / steps) if steps else 0.0,
        "decisions": int(len(dw)),
        "decision_ms_mean": float(dw.mean() * 1e3) if len(dw) else 0.0,
        "decision_ms_p99": percentile(dw * 1e3, 99) if len(dw) else 0.0,
        "decision_overhead_fraction": float(dw.sum() / makespan) if len(dw) and makespan > 0 else 0.0,
    }
    out.update(bound_summary(steady))
    out.update(rec.engine)
    if sim_wall_s is not None:
        out["wall_s"] = sim_wall_s
        if rec.engine.get("backend", "sim") == "sim":  # a real engine runs in real time
            out["sim_speedup"] = makespan / sim_wall_s if sim_wall_s > 0 else float("inf")
    return out


def bound_summary(steady: pd.DataFrame) -> dict[str, float]:
    """Mean, p99 and minimum of JCT / bound over the measured tasks (NaN where the run has no bound)."""
    r = steady["jct_over_bound"].dropna().to_numpy(dtype=float) if "jct_over_bound" in steady else np.array([])
    return {"jct_over_bound_mean": float(r.mean()) if len(r) else float("nan"), "jct_over_bound_p99": percentile(r, 99),
            "jct_over_bound_min": float(r.min()) if len(r) else float("nan")}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def write_run(out_dir: str | Path, rec: RunRecord, summary: dict[str, Any], config_yaml: str) -> Path:
    """Write every output atomically; summary.json last, as the completion marker, with the
    digest of every file it covers (`is_complete` checks them)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_outcome(out)  # a rerun is incomplete until it finishes
    _atomic_write(out / "config.yaml", lambda p: Path(p).write_text(config_yaml))
    _atomic_write(out / "tasks.parquet", lambda p: rec.tasks.to_parquet(p, index=False))
    _atomic_write(out / "requests.parquet", lambda p: rec.requests.to_parquet(p, index=False))
    _atomic_write(out / "timeline.parquet", lambda p: rec.timeline.to_parquet(p, index=False))
    summary = {**summary, "files": {f: file_digest(out / f) for f in OUTPUT_FILES if f != "summary.json"}}
    summary["digest"] = summary_digest(summary)
    _atomic_write(out / "summary.json", lambda p: Path(p).write_text(json.dumps(summary, indent=2, sort_keys=True)))
    return out


def summary_digest(summary: dict[str, Any]) -> str:
    """The digest of a summary's own content (every key but `digest`): a hand edit is detected."""
    body = json.dumps({k: v for k, v in summary.items() if k != "digest"}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def clear_outcome(out_dir: str | Path) -> None:
    """Remove the completion marker and any recorded failure of an earlier attempt."""
    for f in ("summary.json", "error.txt"):
        (Path(out_dir) / f).unlink(missing_ok=True)


def incomplete_reason(out_dir: str | Path, fingerprint: str | None = None) -> str | None:
    """None if the folder holds a complete run (with `fingerprint`: made by the same code and
    config); else why not, naming the file."""
    out = Path(out_dir)
    try:
        summary = json.loads((out / "summary.json").read_text())
    except FileNotFoundError:
        return f"{out / 'summary.json'} is missing"
    except (OSError, ValueError) as e:
        return f"{out / 'summary.json'} is unreadable ({type(e).__name__})"
    if not isinstance(summary, dict):
        return f"{out / 'summary.json'} is not a JSON object"
    if summary.get("digest") != summary_digest(summary):
        return f"{out / 'summary.json'} does not match its own digest (edited, corrupt, or written by an older version)"
    if fingerprint is not None and summary.get("fingerprint") != fingerprint:
        return f"{out} was made by other code or another config"
    for f, digest in (summary.get("files") or {f: None for f in OUTPUT_FILES if f != "summary.json"}).items():
        path = out / f
        if not path.is_file():
            return f"{path} is missing"
        if digest is not None and file_digest(path) != digest:
            return f"{path} does not match its digest in summary.json (changed or corrupt)"
    return None


def is_complete(out_dir: str | Path, fingerprint: str | None = None) -> bool:
    """All outputs written and intact (summary.json last, with their digests); with
    `fingerprint` (topas/run_identity.py), also made by the same code and config."""
    return incomplete_reason(out_dir, fingerprint) is None


def format_summary(summary: dict[str, Any]) -> str:
    rows = [
        ("tasks (measured)", f"{summary['num_tasks']} ({summary['num_tasks_measured']})"),
        ("JCT mean / p50 / p90 / p99 / max (s)",
         " / ".join(f"{summary[k]:.2f}" for k in ("jct_mean", "jct_p50", "jct_p90", "jct_p99", "jct_max"))),
        ("throughput (tasks/s, req/s)", f"{summary['throughput_tasks_per_s']:.4f}, {summary['throughput_requests_per_s']:.3f}"),
        ("cache hit rate", f"{summary['cache_hit_rate']:.3f}"),
        ("mean decode batch size", f"{summary['mean_batch_size']:.1f}"),
        ("preemptions / retractions", f"{summary['preemptions']} / {summary.get('retractions', 0)}"),
        ("swap in / out (GB)", f"{summary.get('swap_in_bytes', 0) / 1e9:.2f} / {summary.get('swap_out_bytes', 0) / 1e9:.2f}"),
        ("decisions, ms mean / p99", f"{summary['decisions']}, {summary['decision_ms_mean']:.3f} / {summary['decision_ms_p99']:.3f}"),
    ]
    if "sim_speedup" in summary:
        rows.append(("simulated / wall time", f"{summary['makespan_s']:.0f} s / {summary['wall_s']:.2f} s = {summary['sim_speedup']:.0f}x"))
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)
