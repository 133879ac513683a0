"""Real-engine placement (topas/placement.py): runs go to GPUs, not cores; no two
runs ever share a GPU at once; two visible GPUs get the runs split over both; no GPU: one run at
a time. No real server: the planning function, and the workers with a stand-in job command."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from topas.placement import gpu_groups, plan_placement, run_placed, server_signature, visible_gpus

ROOT = Path(__file__).resolve().parents[1]


def _jobs(n_sched=6, workloads=("chain3", "dag4", "metagpt_sop")):
    return [[f"workload={w}", f"scheduler=s{k}", "seed=0", "backend=sglang"] for w in workloads for k in range(n_sched)]


def test_visible_gpus_from_cuda_visible_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == ["0", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert gpu_groups(["0", "1", "2", "3"], 2) == ["0,1", "2,3"]
    assert gpu_groups(["0", "1", "2"], 2) == ["0,1"]  # a left-over GPU is not used
    assert gpu_groups([], 1) == [None]  # no GPU: one CPU worker
    with pytest.raises(ValueError, match="gpus_per_run"):
        gpu_groups(["0"], 2)


def test_two_fake_gpus_split_the_runs_and_each_runs_once():
    jobs = _jobs()
    groups = gpu_groups(visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}))
    workers = plan_placement(jobs, groups, costs=[float(1 + i % 4) for i in range(len(jobs))])
    assert [w.devices for w in workers] == ["0", "1"]  # disjoint device groups, one worker each
    assigned = sorted(i for w in workers for i in w.jobs)
    assert assigned == list(range(len(jobs)))  # every run exactly once
    assert all(w.jobs for w in workers)  # split over both
    assert abs(workers[0].est_s - workers[1].est_s) <= 4  # balanced by estimated time


def test_no_gpu_means_one_worker_and_max_workers_caps():
    jobs = _jobs()
    assert len(plan_placement(jobs, gpu_groups([]))) == 1
    assert len(plan_placement(jobs, gpu_groups(["0", "1", "2", "3"]), max_workers=2)) == 2


def test_runs_of_one_server_are_consecutive_on_a_worker():
    jobs = [["workload=dag4", f"scheduler=s{k}", f"backend.max_total_tokens={pool}"]
            for k in range(4) for pool in (16000, 30000)]
    for w in plan_placement(jobs, ["0"]):
        sigs = [server_signature(jobs[i]) for i in w.jobs]
        changes = sum(a != b for a, b in zip(sigs, sigs[1:]))
        assert changes == len(set(sigs)) - 1  # one server start per distinct server
    # client-side options and the policy do not change the server
    assert server_signature(["scheduler=topas", "backend.time_scale=2", "model=tiny_cpu"]) == "model=tiny_cpu"


FAKE_WORKER = textwrap.dedent("""
    import json, os, sys, time
    spec = json.load(open(sys.argv[1]))
    from topas.sweep import record_outcome
    for job in spec["jobs"]:
        t0 = time.time()
        time.sleep(0.3)
        with open(os.environ["INTERVALS"], "a") as f:
            f.write(json.dumps({"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "t0": t0, "t1": time.time()}) + "\\n")
        record_outcome(spec["manifest"], job, spec["sweep_dir"], "ok")
""")


def _run(tmp_path, gpus, monkeypatch):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    intervals = tmp_path / "intervals.jsonl"
    monkeypatch.setenv("INTERVALS", str(intervals))
    jobs = _jobs(n_sched=3, workloads=("chain3", "dag4"))
    workers = plan_placement(jobs, gpu_groups(gpus))
    df, rc = run_placed(workers, jobs, tmp_path, tmp_path / "manifest.jsonl", tmp_path / "sweep.log",
                        command=lambda f: [sys.executable, str(script), str(f)])
    assert rc == 0 and (df["status"] == "ok").all() and len(df) == len(jobs)
    return [json.loads(ln) for ln in intervals.read_text().splitlines()]


def test_no_two_runs_share_a_gpu_at_once(tmp_path, monkeypatch):
    got = _run(tmp_path, ["0", "1"], monkeypatch)
    assert {r["gpu"] for r in got} == {"0", "1"}  # both GPUs used, each run pinned to one
    for g in ("0", "1"):
        iv = sorted((r["t0"], r["t1"]) for r in got if r["gpu"] == g)
        assert all(a[1] <= b[0] for a, b in zip(iv, iv[1:])), f"runs overlap on GPU {g}"
    # the two workers did run side by side (runs on different GPUs may overlap)
    a = [(r["t0"], r["t1"]) for r in got if r["gpu"] == "0"]
    b = [(r["t0"], r["t1"]) for r in got if r["gpu"] == "1"]
    assert min(x[1] for x in a) > min(y[0] for y in b) or min(y[1] for y in b) > min(x[0] for x in a)


def test_without_a_gpu_exactly_one_run_at_a_time(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    got = _run(tmp_path, [], monkeypatch)
    iv = sorted((r["t0"], r["t1"]) for r in got)
    assert all(a[1] <= b[0] for a, b in zip(iv, iv[1:]))


def test_reproduce_dry_run_on_two_fake_gpus():
    env = {**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    p = subprocess.run([sys.executable, "-m", "topas.reproduce", "--grid", "real", "--backend", "sglang", "--dry-run",
                        "--runs", "/nonexistent/runs"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "worker 0: GPU 0 " in p.stdout and "worker 1: GPU 1 " in p.stdout
    assert "estimated real time" in p.stdout and "dry run: nothing was started" in p.stdout
    assert not Path("/nonexistent/runs").exists()


def test_slurm_gpu_launcher_composes():
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="config", overrides=["+experiment=main", "backend=sglang", "hydra/launcher=slurm_gpu"],
                      return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher") and cfg.hydra.launcher.gpus_per_node == 1
    assert cfg.backend.gpus_per_run == 1


def test_reproduce_passes_overrides_and_names_make_capacity():
    from topas.reproduce import sweep_overrides

    ov = sweep_overrides("main", "real", "sglang", ["gpu=h200", "backend.time_scale=0.5"], Path("/tmp/r"))
    assert ov[-2:] == ["gpu=h200", "backend.time_scale=0.5"] and "backend.reuse_server=true" in ov
    assert "experiment_name=main_real_sglang" in ov
    cpu = sweep_overrides("main", "quick", "sglang", [], Path("/tmp/r"), cpu=True)
    assert "model=tiny_cpu" in cpu and "workload.load=null" in cpu
    p = subprocess.run([sys.executable, "-m", "topas.reproduce", "--grid", "real", "--backend", "sglang", "--dry-run",
                        "gpu=h200"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "0"})
    assert p.returncode == 2
    err = p.stderr.strip()
    assert "\n" not in err and "make capacity" in err and "gpu=h200" in err


def test_capacity_per_model_gpu_pair(tmp_path, monkeypatch):
    from topas.workloads import capacity

    monkeypatch.setattr(capacity, "PAIR_DIR", tmp_path)
    assert capacity.capacity_of("dag4", "qwen2_5_32b", "h200") is None  # not measured: the run's error names make capacity
    capacity.capacity_file("qwen2_5_32b", "h200").write_text("dag4: {model: qwen2_5_32b, gpu: h200, tasks_per_s: 0.5}\n")
    assert capacity.capacity_of("dag4", "qwen2_5_32b", "h200") == 0.5
    assert capacity.capacity_of("dag4", "qwen2_5_32b", "a100_80gb") == capacity.capacity_of("dag4")  # the committed file, unchanged


def test_the_cpu_install_keeps_a_gpu_sglang_install(tmp_path):
    # `make test` runs scripts/install_sglang_cpu.sh; with a GPU install (simulated) it changes nothing
    venv = Path(sys.prefix)
    p = subprocess.run(["bash", str(ROOT / "scripts" / "install_sglang_cpu.sh"), str(venv)], capture_output=True,
                       text=True, timeout=120, env={**__import__("os").environ, "TOPAS_SGLANG_GPU_INSTALLED": "1"})
    assert p.returncode == 0 and "GPU sglang install found" in p.stdout and "keeping it" in p.stdout
