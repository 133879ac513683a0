"""One short fidelity validation against the real sglang 0.5.23 server on CPU (the tiny model):
`topas.fidelity` replays one trace on the real server and on the simulator configured like it,
then the two must agree on dependency order, output lengths and cached-prefix hits per call.

Four dag4 tasks (token scale 0.05) arriving at least 0.7 s apart, so every call's cache hit
is decided by the workflow alone (an earlier call of its agent, or of its task, finished),
not by a race the two engines could time differently. One server start (~20 s); a fixed
rough profile of this machine is enough: the latencies are not what is asserted here."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from sglang_support import require_sglang

require_sglang()

from topas.engines.latency.measured import FORMAT  # noqa: E402
from topas.fidelity.metrics import dependency_violations  # noqa: E402
from topas.fidelity.report import write_report  # noqa: E402
from topas.fidelity.validate import Setup, WorkloadSpec, validate_all  # noqa: E402
from topas.workloads import load_trace  # noqa: E402

pytestmark = pytest.mark.sglang

# the tiny model on this CPU, roughly (topas.engines.sglang.tools.profiler measures it properly)
PROFILE = {
    "format": FORMAT,
    "prefill": {"extend_tokens": [8, 512, 2048], "prefix_tokens": [0, 1024, 2048],
                "seconds": [[0.0045, 0.02, 0.048], [0.013, 0.035, 0.07], [0.06, 0.10, 0.14]]},
    "decode": {"batch_size": [1, 4, 16], "context_tokens": [32, 512, 2048],
               "seconds": [[0.0024, 0.0027, 0.004], [0.003, 0.004, 0.0085], [0.0045, 0.0095, 0.026]]},
    "prefill_batch_shared_s": 0.0035,
    "request_latency_s": {"submit": 0.0035, "return": 0.0012},
}
SPEC = WorkloadSpec("dag4", 0.05, 4, 0.4)
SEED = 3  # Poisson arrivals of this seed are >= 0.7 s apart (asserted below)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    base = tmp_path_factory.mktemp("fidelity")
    profile = base / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    s = Setup(workloads=[SPEC], schedulers=["fcfs"], repeats=1, seed=SEED, profile=str(profile), runs=base / "runs",
              replay_timeout_s=120.0, say=lambda m: None)
    res = validate_all(s)
    res["report"] = write_report(res, base / "report")
    return res


def _requests(folder) -> pd.DataFrame:
    return pd.read_parquet(f"{folder}/requests.parquet").set_index(["task_id", "node"]).sort_index()


def test_the_trace_leaves_no_race_for_the_cache(result):
    trace = load_trace(result["cells"][0]["trace"])
    arrivals = sorted(t.arrival for t in trace.tasks)
    assert len(arrivals) == 4 and min(b - a for a, b in zip(arrivals, arrivals[1:])) >= 0.7


def test_simulator_and_real_server_agree_on_order_lengths_and_hits(result):
    cell = result["cells"][0]
    trace = load_trace(cell["trace"])
    real, sim = cell["real_dirs"][0], cell["sim_dir"]
    assert dependency_violations(real, trace) == [] and dependency_violations(sim, trace) == []
    r, s = _requests(real), _requests(sim)
    assert list(r.index) == list(s.index) and len(r) == 16
    expected = {(t.task_id, n): node.output_tokens for t in trace.tasks for n, node in t.workflow.nodes.items()}
    assert r["output_tokens"].to_dict() == expected == s["output_tokens"].to_dict()
    assert r["prefix_hit_tokens"].to_dict() == s["prefix_hit_tokens"].to_dict()
    assert r["prefix_hit_tokens"].sum() > 0  # agent prefixes are reused from the second task on
    # within each task both engines release the calls in the same dependency order
    for tid in r.index.get_level_values(0).unique():
        order = lambda df, tid=tid: [n for n in df.loc[tid].sort_values("ready").index if n in ("s", "j")]  # noqa: E731
        assert order(r) == order(s) == ["s", "j"]


def test_report_and_every_run_folder_are_written(result):
    cell = result["cells"][0]
    for folder in (*cell["real_dirs"], cell["sim_dir"], *cell["sim_scaled_dirs"]):
        assert (pd.io.common.Path(folder) / "summary.json").is_file()
    f = cell["speed_factors"][0]
    assert f["decode"] > 0 and f["prefill"] > 0
    md = result["report"]["md"].read_text()
    assert "| dag4 | fcfs |" in md and result["report"]["figure"].is_file()
    m = cell["metrics"]
    assert m["cached_tokens"]["err"] == 0.0 and m["retractions"]["real"] == m["retractions"]["sim"] == 0
