"""`make reproduce BACKEND=sglang`, short: `topas.reproduce --backend sglang` on the real sglang
0.5.23 server (CPU, tiny model, scaled tokens): placement (one worker, one run at a time, one
kept server), sweep -> run folders -> tables -> figures, and every real run with the simulator's
prediction of the same trace beside it (sim_prediction.json, real_vs_sim.md). Two DAG-4 runs, ~1.5 min here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sglang_support import ROOT, require_sglang

require_sglang()

from topas.placement import visible_gpus  # noqa: E402

pytestmark = pytest.mark.sglang


@pytest.mark.skipif(bool(visible_gpus()), reason="the CPU path (a GPU machine runs the real grid instead)")
def test_reproduce_on_the_real_cpu_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    cmd = [sys.executable, "-m", "topas.reproduce", "--grid", "quick", "--backend", "sglang", "--runs",
           str(tmp_path / "runs"), "--out", str(tmp_path / "results"), "workload=dag4", "scheduler=fcfs,topas",
           "workload.num_tasks=4", "workload.arrival_rate=2"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "CPU (no GPU visible" in p.stdout and "estimated real time" in p.stdout
    assert "2 runs: 2 ok" in p.stdout
    summaries = [json.loads(f.read_text()) for f in sorted((tmp_path / "runs" / "main_quick_sglang").glob("**/summary.json"))]
    assert len(summaries) == 2 and {s["backend"] for s in summaries} == {"sglang"}
    assert sorted(s["server_reused"] for s in summaries) == [False, True]  # one server for both runs
    assert all(s["model"] == "tiny_cpu" for s in summaries)
    preds = [json.loads(f.read_text()) for f in (tmp_path / "runs" / "main_quick_sglang").glob("**/sim_prediction.json")]
    assert len(preds) == 2 and all(p["sim_jct_mean"] > 0 and p["sim_makespan_s"] > 0 for p in preds)
    out = tmp_path / "results"
    assert (out / "main_jct.md").exists() and (out / "main_jct.png").exists()
    table = (out / "real_vs_sim.md").read_text()
    assert "fcfs" in table and "topas" in table and "JCT sim (s)" in table
