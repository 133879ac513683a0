"""analysis/stage_waits.py: one cell's mean wait per workflow stage and scheduler, stages in the order they
become ready, seeds averaged, a scheduler seen in two folders labelled by folder."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.small_runs import shared_small_runs

from analysis import stage_waits
from analysis.load import folder_labels, load_requests, load_runs


def _requests(rows):
    cols = ["rid", "task_id", "stage", "ready", "first_admit", "prefix_tokens", "prefix_hit_tokens", "service_s"]
    return pd.DataFrame(rows, columns=cols)


def test_stage_summary_waits_misses_and_order():
    r = _requests([
        ("a0", 0, "z_first", 0.0, 1.0, 100, 100, 2.0), ("b0", 0, "a_second", 3.0, 7.0, 100, 40, 4.0),
        ("a1", 1, "z_first", 10.0, 13.0, 100, 0, 2.0), ("b1", 1, "a_second", 15.0, 17.0, 100, 100, 4.0)])
    s = stage_waits.stage_summary(r)
    assert s.loc["z_first", "wait_s"] == 2.0 and s.loc["a_second", "wait_s"] == 3.0
    assert s.loc["z_first", "prefix_miss"] == 50.0 and s.loc["a_second", "prefix_miss"] == 30.0
    assert s.loc["z_first", "calls"] == 2
    # a hit that runs on into the call's cached history counts for the prefix only; a host hit is a hit
    long_hit = r.assign(prefix_hit_tokens=[100, 900, 0, 40], host_hit_tokens=[0, 0, 60, 0])
    assert list(stage_waits.prefix_miss(long_hit)) == [0, 0, 40, 60]
    # ready 3 and 5 s after the task's first call: the second stage, whatever its name sorts as
    assert list(s.sort_values("offset_s").index) == ["z_first", "a_second"]


@pytest.fixture(scope="module")
def main_runs(tmp_path_factory):
    return shared_small_runs(tmp_path_factory) / "main"


def test_stage_table_averages_each_schedulers_seeds(main_runs):
    runs = stage_waits.select(load_runs(main_runs), "dag4", None, None, None)
    table = stage_waits.stage_table(runs)
    assert list(table.index) == ["fcfs", "topas"] and set(table["seeds"]) == {2}
    topas = runs[runs["scheduler"] == "topas"]
    per_run = [stage_waits.stage_summary(load_requests(d))["wait_s"] for d in topas["run_dir"]]
    expected = pd.concat(per_run, axis=1).mean(axis=1)
    stages = [c for c in table.columns if c not in ("seeds", "jct_mean", "makespan_s")]
    assert sorted(stages) == sorted(expected.index)
    assert table.loc["topas", stages].to_numpy() == pytest.approx(expected[stages].to_numpy())
    assert table.loc["topas", "jct_mean"] == pytest.approx(topas["jct_mean"].mean())


def test_a_scheduler_in_two_folders_is_labelled_by_folder(main_runs):
    runs = load_runs(main_runs)
    both = stage_waits.label_by_folder({"base": runs[runs["scheduler"].isin(["fcfs", "topas"])],
                                        "design_v": runs[runs["scheduler"] == "topas"]})
    assert set(both["label"]) == {"fcfs", "topas (base)", "topas (design_v)"}


def test_folders_of_one_name_keep_their_own_rows(main_runs, tmp_path, capsys):
    """A regime cell's configs are folders of one name under each scheduler (host0-memNone): neither replaces
    the other, each is labelled by its path."""
    assert folder_labels(["x/a/cfg", "x/b/cfg", "x/c"]) == ["x/a/cfg", "x/b/cfg", "c"]
    assert folder_labels(["v/design_a", "w/overload_a", "design_b"], strip=("design_", "overload_")) == [
        "v/design_a", "w/overload_a", "b"]
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "main").symlink_to(main_runs)
    stage_waits.main([str(tmp_path / "a" / "main"), str(tmp_path / "b" / "main"), "--workload", "dag4",
                      "--scheduler", "topas"])
    out = capsys.readouterr().out
    assert f"| topas ({tmp_path / 'a' / 'main'})" in out and f"| topas ({tmp_path / 'b' / 'main'})" in out


def test_two_configs_of_one_scheduler_and_seed_in_a_folder_are_refused(main_runs):
    """Runs of two host tiers (or loads, or pools) in one selection would be averaged as seeds: a LoadError
    naming the config key they differ in (here two runs relabelled as one seed: they differ in their seed)."""
    from analysis.load import LoadError

    runs = stage_waits.select(load_runs(main_runs), "dag4", None, None, ["topas"])
    stage_waits.check_one_config(runs, "main")  # one run per seed: accepted
    with pytest.raises(LoadError, match=r"main holds several runs of topas seed 0 \(.* differ in seed\): pass --load"):
        stage_waits.check_one_config(runs.assign(seed=0), "main")


def test_the_duplicate_pair_named_is_of_one_key():
    """Rows of two duplicated keys interleaved: the pair named agrees on its key (else the config difference printed
    would be between runs of two cells)."""
    from analysis.load import duplicate_pair

    df = pd.DataFrame({"scheduler": ["spf", "fcfs", "spf", "fcfs", "lpm"], "seed": [1, 0, 1, 0, 2],
                       "run_dir": ["s1b", "f0a", "s1a", "f0b", "l2"]})
    a, b = duplicate_pair(df, ["scheduler", "seed"])
    assert (a["run_dir"], b["run_dir"]) == ("f0a", "f0b")
    assert duplicate_pair(df.iloc[[0, 1, 4]], ["scheduler", "seed"]) is None
    assert duplicate_pair(df.iloc[:0], ["scheduler", "seed"]) is None


def test_a_cell_with_no_run_is_one_error_line(main_runs, capsys):
    with pytest.raises(SystemExit, match="error: no complete run of workload shape_x at load 1.1"):
        stage_waits.main([str(main_runs), "--workload", "shape_x", "--load", "1.1"])


def test_the_engine_table_averages_each_labels_run_summaries(main_runs, capsys):
    runs = stage_waits.select(load_runs(main_runs), "dag4", None, None, ["topas"])
    table = stage_waits.engine_table(runs)
    assert list(table.index) == ["topas"] and table.loc["topas", "seeds"] == len(runs) == 2
    for c in ("jct_mean", "jct_p99", "makespan_s", *stage_waits.ENGINE):
        assert table.loc["topas", c] == pytest.approx(runs[c].mean())
    stage_waits.main([str(main_runs), "--workload", "dag4", "--value", "engine"])
    out = capsys.readouterr().out
    assert "swap_in_GB" in out and "prefill_k_tokens" in out and "| topas" in out and "| fcfs" in out
    # the JCT's two parts add up to the runs' mean JCT (the summaries' measured tasks)
    both = table.loc["topas", "entry_wait_s"] + table.loc["topas", "in_progress_s"]
    assert both == pytest.approx(table.loc["topas", "jct_mean"]) and table.loc["topas", "in_progress_s"] > 0


def test_history_outlived_counts_same_agent_histories_idle_past_the_cache_turnover():
    # 100 tokens computed over 10 s into a 1,000-token pool: the cache turns over in 100 s
    cols = ["task_id", "agent", "admit", "finish", "computed_tokens"]
    r = pd.DataFrame([(0, "A", 210.0, 230.0, 10), (0, "A", 0.0, 5.0, 40),    # A's history idle 205 s: outlived
                      (0, "B", 6.0, 10.0, 20), (0, "B", 50.0, 60.0, 10),    # B's idle 40 s: kept
                      (1, "A", 1.0, 8.0, 20)], columns=cols)                 # one call: no history reused
    assert stage_waits.history_outlived(r, 1000, 10.0) == 0.5
    # a pool ten times larger turns over in 1,000 s: nothing outlives it
    assert stage_waits.history_outlived(r, 10000, 10.0) == 0.0
    single = r[r["task_id"] == 1]
    assert pd.isna(stage_waits.history_outlived(single, 1000, 10.0))


def test_entries_passing_counts_tasks_started_while_a_started_tasks_call_waits():
    cols = ["task_id", "ready", "first_admit"]
    r = pd.DataFrame([(0, 0.0, 1.0), (0, 5.0, 9.0),      # task 0 starts at 1; its second call waits 5 -> 9
                      (1, 4.0, 6.0),                     # task 1 starts at 6 while task 0's call waits: it passes
                      (2, 10.0, 12.0),                   # task 2 starts at 12: nothing waits
                      (3, 8.0, 9.0)], columns=cols)      # task 3 starts at 9, admitted with the call it would pass
    assert stage_waits.entries_passing(r) == 0.25
    # a call of a task not yet started is not passed: task 1's own start makes it no started task's call
    fresh = pd.DataFrame([(0, 0.0, 5.0), (1, 1.0, 2.0)], columns=cols)
    assert stage_waits.entries_passing(fresh) == 0.0
    assert pd.isna(stage_waits.entries_passing(fresh.iloc[:0]))


def test_jct_split_is_the_wait_for_a_tasks_first_admission_and_the_rest():
    requests = pd.DataFrame([(0, 3.0), (0, 1.0), (1, 12.0), (2, 0.5)], columns=["task_id", "first_admit"])
    tasks = pd.DataFrame([(0, 0.0, 10.0, False), (1, 10.0, 20.0, False), (2, 0.0, 2.0, True)],  # task 2: warm-up
                         columns=["task_id", "arrival", "finish", "warmup"])
    # task 0 starts at 1 (its earliest admission) and ends at 10; task 1 waits 2 s and runs 8 s
    assert stage_waits.jct_split(requests, tasks) == (1.5, 8.5)
