"""A run's fingerprint covers the code it executes and nothing else (topas/fingerprint.py): an edit to analysis/,
docs/, a driver, another engine or another policy package leaves every cached run valid; an edit to the code a
run executes re-runs exactly the runs that execute it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from topas import fingerprint as fp

ROOT = Path(__file__).resolve().parents[1]
RUNS = {  # a run of each kind: (backend, scheduler)
    "sim/topas": ("sim", "topas"), "sim/topas_base": ("sim", "topas_base"), "sim/fcfs": ("sim", "fcfs"),
    "sim/parrot_fcfs": ("sim", "parrot_fcfs"), "sglang/topas": ("sglang", "topas"), "sglang/lpm": ("sglang", "lpm"),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    for d in ("topas", "baselines", "analysis", "docs"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _prints(root: Path) -> dict[str, str]:
    fp.clear_caches()
    return {k: fp.run_fingerprint({"backend": {"name": b}, "scheduler": {"name": s}, "seed": 0}, root)
            for k, (b, s) in RUNS.items()}


def _edit(root: Path, rel: str) -> None:
    f = root / rel
    f.write_text(f.read_text() + ("\n# a comment\n" if f.suffix == ".py" else "\n"))


@pytest.mark.parametrize("edited, rerun", [
    ("analysis/figures.py", set()),
    ("docs/topas.md", set()),
    ("topas/reproduce.py", set()),  # a driver
    ("topas/sweep.py", set()),
    ("topas/scheduler_sets.py", set()),  # sweep data: a scheduler added to a set re-runs no run
    ("topas/scheduler/search.py", {"sim/topas", "sim/topas_base", "sglang/topas"}),
    ("baselines/fcfs.py", {"sim/fcfs", "sim/parrot_fcfs", "sglang/lpm"}),  # the baselines' package
    ("topas/engines/sim/radix.py", {"sim/topas", "sim/topas_base", "sim/fcfs", "sim/parrot_fcfs"}),
    ("topas/engines/sglang/plugin/adapter.py", {"sglang/topas", "sglang/lpm"}),  # runs in the server, not imported
    ("topas/workflow.py", set(RUNS)),  # shared code
    ("topas/engines/latency/models/qwen2_5_32b/config.json", set(RUNS)),  # data beside the latency models
])
def test_an_edit_re_runs_exactly_the_runs_that_execute_it(tree, edited, rerun):
    before = _prints(tree)
    _edit(tree, edited)
    after = _prints(tree)
    fp.clear_caches()
    assert {k for k in RUNS if before[k] != after[k]} == rerun


def test_the_code_of_a_run_is_its_engine_its_policy_package_and_what_they_import():
    sim_topas = fp.code_modules(fp.entries("sim", "topas"))
    assert {"topas.runner", "topas.engines.sim.engine", "topas.scheduler.score", "topas.workflow"} <= sim_topas
    assert not {m for m in sim_topas if m.startswith(("baselines", "topas.engines.sglang", "analysis", "topas.reproduce"))}
    assert "topas.engines.sglang.plugin.hooks" in fp.code_modules(fp.entries("sglang", "fcfs"))
    # a scheduler registered at run time (a test's): every policy package
    assert set(fp.entries("sim", "no_such_policy")) >= {"topas.scheduler", "baselines"}


def test_the_files_a_run_reads_count_by_content_and_place_in_the_checkout_not_by_where_the_checkout_is(tmp_path):
    """A run reading the capacity files (every run that sets workload.load) has one fingerprint in any clone or
    worktree of the repository: a runs folder made from one checkout is resumed from another."""
    from topas.run_identity import content_digest

    digests = []
    for clone in ("a", "b"):
        f = tmp_path / clone / "topas" / "workloads" / "data" / "capacity.yaml"
        f.parent.mkdir(parents=True)
        f.write_text("dag4: 1.0\n")
        digests.append(content_digest([f], tmp_path / clone))
    assert digests[0] == digests[1]
    f.write_text("dag4: 2.0\n")  # the same file edited in place: its runs re-run
    assert content_digest([f], tmp_path / "b") != digests[1]
