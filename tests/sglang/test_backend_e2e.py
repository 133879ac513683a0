"""End to end through `topas.runner.run`: `backend=sglang model=tiny_cpu` on the real sglang
0.5.23 server on CPU, a short DAG-4 workload, TOPAS and FCFS.

Three runs, made once for the module: TOPAS on a fresh server (stopped after the run),
then FCFS and TOPAS again on one kept server (`backend.reuse_server=true`: the policy is
switched in place, the prefix cache flushed). Two server starts in all (~20 s each here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sglang_support import ROOT, compose_cfg, require_sglang  # noqa: E402

require_sglang()

from topas.engines.sglang.client import backend_config, shared_server  # noqa: E402
from topas.engines.sglang.client.processes import descendants  # noqa: E402
from topas.results import OUTPUT_FILES, REQUESTS, TASKS, TIMELINE, is_complete  # noqa: E402
from topas.runner import run  # noqa: E402

pytestmark = pytest.mark.sglang

PROFILE = "gpu" if backend_config.gpu_visible() else "cpu"  # backend.profile=auto; this file also runs on a GPU machine
SCALE = 0.05  # dag4 at 5%: prefixes S 256, L 205, R 205, J 154; input 26; output 13 tokens
NUM_TASKS = 4
EXTRA_FILES = ("server.log", "decisions.jsonl", "iterations.jsonl", "calls.jsonl")


def cfg(*overrides):
    return compose_cfg(
        "backend=sglang", "model=tiny_cpu", "workload=dag4", f"workload.num_tasks={NUM_TASKS}",
        "workload.arrival_rate=4", f"backend.token_scale={SCALE}", "backend.replay_timeout_s=120",
        "backend.startup_timeout_s=300", "backend.max_total_tokens=4096", "backend.extra_args=[--random-seed,0]",
        *overrides,
    )


def sglang_children() -> list[int]:
    """Processes below this one whose command line mentions sglang."""
    out = []
    for pid in descendants(os.getpid()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if b"sglang" in cmd and state[state.rfind(")") + 2] != "Z":
            out.append(pid)
    return out


class Progress:
    """Stands in for tqdm in the runner: counts finished tasks."""

    calls: list[int] = []

    def __init__(self, *a, **kw) -> None:
        pass

    def update(self, n: int = 1) -> None:
        Progress.calls.append(n)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("sglang_backend")
    out: dict[str, tuple[Path, dict]] = {}
    mp = pytest.MonkeyPatch()
    mp.setattr("topas.runner.tqdm", Progress)
    try:
        Progress.calls = []
        out["topas"] = run(cfg("scheduler=topas"), out_dir=base / "topas", quiet=True)
        out["progress"] = list(Progress.calls)
        out["children_after_fresh"] = sglang_children()
        out["fcfs"] = run(cfg("scheduler=fcfs", "backend.reuse_server=true"), out_dir=base / "fcfs", quiet=True)
        out["children_while_kept"] = sglang_children()
        out["topas_reused"] = run(cfg("scheduler=topas", "backend.reuse_server=true"), out_dir=base / "topas2", quiet=True)
        yield out
    finally:
        mp.undo()
        shared_server.shutdown_shared_servers()
    # checked at teardown, after every test of the module used the kept server (no test has to run last)
    assert sglang_children() == [], "a kept server outlived shutdown_shared_servers()"


RUNS = ("topas", "fcfs", "topas_reused")


def tables(runs, name):
    folder, summary = runs[name]
    return (folder, summary, pd.read_parquet(folder / "tasks.parquet"), pd.read_parquet(folder / "requests.parquet"),
            pd.read_parquet(folder / "timeline.parquet"))


@pytest.mark.parametrize("name", RUNS)
def test_every_output_file_with_the_result_columns(runs, name):
    folder, s, tasks, reqs, tl = tables(runs, name)
    assert is_complete(folder)
    for f in (*OUTPUT_FILES, *EXTRA_FILES):
        assert (folder / f).is_file() and (folder / f).stat().st_size > 0, f
    assert list(tasks.columns) == TASKS.names and list(reqs.columns) == REQUESTS.names
    assert list(tl.columns) == TIMELINE.names
    assert len(tasks) == NUM_TASKS and len(reqs) == 4 * NUM_TASKS and tasks["warmup"].sum() == 0
    assert s["backend"] == "sglang" and s["sglang_version"] == "0.5.23" and s["profile"] == PROFILE
    assert s["token_scale"] == SCALE and s["scheduler"] == name.split("_")[0]
    assert s["requests_served"] == 4 * NUM_TASKS and s["kv_pool_tokens"] == 4096 and s["decisions"] > 0
    assert s["plugin_errors"] == 0
    json.loads((folder / "summary.json").read_text())


@pytest.mark.parametrize("name", RUNS)
def test_calls_complete_in_dependency_order_with_exact_scaled_lengths(runs, name):
    _, _, tasks, reqs, _ = tables(runs, name)
    prefix = {"S": 256, "L": 205, "R": 205, "J": 154}
    deps = {"s": (), "l": ("s",), "r": ("s",), "j": ("l", "r")}
    for tid, g in reqs.groupby("task_id"):
        by = g.set_index("node")
        assert set(by.index) == set(deps)
        for node, ds in deps.items():
            me = by.loc[node]
            assert me["output_tokens"] == 13 and me["prefix_tokens"] == prefix[me["agent"]]
            assert me["prompt_tokens"] == prefix[me["agent"]] + 13 * len(ds) + 26
            for d in ds:
                assert me["ready"] >= by.loc[d, "finish"], (tid, node, d)
            assert me["ready"] <= me["first_admit"] <= me["first_token"] <= me["finish"], (tid, node)
        t = tasks.set_index("task_id").loc[tid]
        assert t["finish"] == pytest.approx(by["finish"].max()) and t["jct"] == pytest.approx(t["finish"] - t["arrival"])
    assert (reqs["preemptions"] == 0).all() and (reqs["host_hit_tokens"] == 0).all()


@pytest.mark.parametrize("name", RUNS)
def test_cached_tokens_match_the_prompt_segments(runs, name):
    """dag4: agents are not shared between nodes and task segments are task-specific, so a
    call reuses exactly its agent prefix when an earlier call of that agent finished its
    prefill before this call was admitted, and nothing when no call of its agent was
    admitted before it (the pool holds everything: no eviction). Calls admitted while the
    other's prefill was still running are order-dependent and skipped. (+1: a random
    first token of an upstream output may equal another task's; fixed seed: deterministic.)"""
    _, _, _, reqs, _ = tables(runs, name)
    checked = 0
    for _, r in reqs.iterrows():
        same = reqs[(reqs["agent"] == r["agent"]) & (reqs["rid"] != r["rid"])]
        done_before = same[same["first_token"] <= r["first_admit"]]
        admitted_before = same[same["first_admit"] < r["first_admit"]]
        if len(done_before):
            assert r["prefix_tokens"] <= r["prefix_hit_tokens"] <= r["prefix_tokens"] + 1, r.to_dict()
            checked += 1
        elif not len(admitted_before):
            assert r["prefix_hit_tokens"] <= 1, r.to_dict()
            checked += 1
        assert r["computed_tokens"] == r["prompt_tokens"] - r["prefix_hit_tokens"]
    assert checked >= len(reqs) // 2  # tasks overlap little at 4 tasks/s; more skips only on a loaded machine
    # every agent's first call computes its prefix; each later task finds it
    first = reqs.sort_values("first_admit").groupby("agent").head(1)
    assert (first["prefix_hit_tokens"] <= 1).all()


@pytest.mark.parametrize("name", RUNS)
def test_timeline_accounts_for_every_generated_token(runs, name):
    _, s, _, reqs, tl = tables(runs, name)
    dec, pre = tl[tl["kind"] == "decode"], tl[tl["kind"] == "prefill"]
    assert len(pre) >= 1 and len(dec) >= 1 and (tl["duration"] > 0).all() and (tl["start"] >= 0).all()
    # one token per request from its prefill, the rest from decode steps
    assert int((dec["steps"] * dec["batch_size"]).sum()) == int((reqs["output_tokens"] - 1).sum())
    assert s["decode_steps"] == int(dec["steps"].sum()) and s["mean_batch_size"] >= 1.0
    assert tl["start"].is_monotonic_increasing
    assert s["makespan_s"] == pytest.approx(tl["start"].iloc[-1] + tl["duration"].iloc[-1])


def test_progress_is_told_of_every_task_and_the_fresh_server_is_gone(runs):
    assert runs["progress"] == [1] * NUM_TASKS
    assert runs["children_after_fresh"] == []
    assert len(runs["children_while_kept"]) >= 3  # launcher + scheduler + detokenizer


def test_kept_server_switched_policy_and_started_once(runs):
    _, s_fcfs = runs["fcfs"]
    _, s_topas = runs["topas_reused"]
    assert s_fcfs["server_reused"] is False and s_fcfs["server_startup_s"] > 0
    assert s_topas["server_reused"] is True and s_topas["server_startup_s"] == 0.0
    folder = runs["topas_reused"][0]
    events = [json.loads(x) for x in (folder / "decisions.jsonl").read_text().splitlines()]
    switch = [e for e in events if e["event"] == "policy"]
    assert switch and switch[0]["policy"] == "topas" and switch[0]["reset"] is True
    assert not any(e["event"] == "start" for e in events)  # the kept server's start is in the fcfs run's log
    first = [json.loads(x) for x in (runs["fcfs"][0] / "decisions.jsonl").read_text().splitlines()][0]
    assert first["event"] == "start" and first["policy"] == "fcfs"


def first_decision(folder: Path) -> dict:
    """The first policy decision of a run, without its timing and counters."""
    events = [json.loads(x) for x in (folder / "decisions.jsonl").read_text().splitlines()]
    d = next(e for e in events if e["event"] == "decision")
    d = {k: v for k, v in d.items() if k not in ("t", "n", "wall_s", "view_s", "reused_before")}
    # request ids carry a per-run prefix (`<run>-t<task>-<node>`): compare the task and node
    return {k: [x.split("-", 1)[1] for x in v] if k in ("waiting", "running", "admit", "preempt", "preempted") else v
            for k, v in d.items()}


def test_a_reused_server_starts_a_run_as_a_fresh_one_does(runs):
    """The kept server, after an FCFS run, is switched to TOPAS with its prefix cache flushed and
    the plugin's workflow state reset: its first decision sees what a fresh server's first
    decision sees (the same waiting call, nothing running, no prefix resident or pinned, no KV
    in use) and decides the same. A cache left over from the FCFS run would show as resident
    prefixes and KV in use."""
    fresh, reused = first_decision(runs["topas"][0]), first_decision(runs["topas_reused"][0])
    assert fresh["running"] == [] and fresh["resident"] == [] and fresh["kv_used"] == 0, fresh
    assert reused == fresh
    # and both replayed the same trace
    _, _, _, a, _ = tables(runs, "topas")
    _, _, _, b, _ = tables(runs, "topas_reused")
    cols = ["task_id", "node", "prompt_tokens", "output_tokens"]
    pd.testing.assert_frame_equal(a[cols].sort_values(cols).reset_index(drop=True),
                                  b[cols].sort_values(cols).reset_index(drop=True))


def test_server_crash_during_the_replay_is_one_line_and_leaves_nothing(runs, tmp_path, monkeypatch):
    """The kept server's scheduler is killed when the first task finishes (no extra start)."""
    import signal

    from topas.engines.sglang.client.backend import SGLangRunError

    (shared,) = shared_server._SHARED.values()
    sched = [p for p in shared.server.pids() if b"scheduler" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert sched

    class KillOnFirstTask(Progress):
        def update(self, n: int = 1) -> None:
            os.kill(sched[0], signal.SIGKILL)

    monkeypatch.setattr("topas.runner.tqdm", KillOnFirstTask)
    with pytest.raises(SGLangRunError) as e:
        run(cfg("scheduler=fcfs", "backend.reuse_server=true", "workload.num_tasks=12"), out_dir=tmp_path / "x",
            quiet=True)
    msg = str(e.value)
    assert "\n" not in msg and "died during the replay" in msg and "crashed with exit code -9" in msg, msg
    assert not shared_server._SHARED and sglang_children() == []
    assert (tmp_path / "x" / "server.log").is_file() and not (tmp_path / "x" / "summary.json").exists()


def test_server_that_dies_at_start_is_one_line_on_the_cli(tmp_path):
    p = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "logger=none", "progress=false", "backend=sglang", "model=tiny_cpu",
         "workload.num_tasks=1", "backend.extra_args=[--no-such-flag]", f"out_dir={tmp_path}/x"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sglang server exited with code") and "server.log" in last, p.stderr[-2000:]
    assert (tmp_path / "x" / "server.log").is_file() and not (tmp_path / "x" / "summary.json").exists()


def test_big_model_on_cpu_is_a_config_error(tmp_path):
    from topas.config import ConfigError

    with pytest.raises(ConfigError, match="CPU profile"):
        run(cfg("model=qwen2_5_7b", "backend.profile=cpu"), out_dir=tmp_path / "x", quiet=True)


def test_gpu_profile_command_parses_with_sglangs_own_arguments():
    """What the backend would launch on a GPU (not runnable here), checked by sglang 0.5.23's parser."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    from topas.engines.sglang.client.server import ServerConfig

    b = backend_config.SGLangBackendConfig(mem_fraction_static=0.85, enable_hierarchical_cache=True, hicache_ratio=2.0,
                                           max_total_tokens=22035, chunked_prefill_size=8192, max_running_requests=256,
                                           extra_args=["--attention-backend", "fa3"])
    kw, extra = backend_config.server_args(b, "gpu")
    cmd = ServerConfig(model_path=ROOT / "topas/engines/latency/models/qwen2_5_32b", extra_args=extra, **kw).command(30000)
    assert cmd[1:3] == ["-m", "sglang.launch_server"] and "--device" not in cmd
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(cmd[3:])
    assert (ns.tp_size, ns.mem_fraction_static, ns.enable_hierarchical_cache, ns.hicache_ratio) == (1, 0.85, True, 2.0)
    assert (ns.max_total_tokens, ns.load_format, ns.skip_tokenizer_init, ns.attention_backend) == (22035, "dummy", True, "fa3")
