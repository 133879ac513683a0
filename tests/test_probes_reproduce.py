"""Issue 31, `python -m topas.reproduce`: its flags, overrides and failures are checked or said in one
`error:` line before anything runs (each probe failed on 0e5a861)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory) -> Path:
    """One complete run of the quick motivation experiment, written without a sweep."""
    from hydra import compose, initialize_config_dir

    import topas.config  # noqa: F401  (resolvers)
    from topas.runner import run

    runs = tmp_path_factory.mktemp("probe_runs")
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        c = compose(config_name="config", overrides=["+experiment=motivation_quick", "logger=none", "progress=false",
                                                      "backend.latency=roofline", "workload.num_tasks=4"])
    run(c, out_dir=runs / "motivation_quick" / c.run_subdir, quiet=True)
    return runs


def reproduce(monkeypatch, capsys, *args) -> tuple[int, str]:
    """topas.reproduce's exit status and its stderr (in this process: the grids are read once)."""
    from topas import reproduce as rp

    monkeypatch.setattr(sys, "argv", ["reproduce", "--grid", "quick", *args])
    with pytest.raises(SystemExit) as e:
        try:
            rp.main()
        except KeyboardInterrupt:
            pytest.fail("Ctrl-C escaped as a KeyboardInterrupt (a traceback)")
    return e.value.code, capsys.readouterr().err.strip()


def assert_one_line(err: str, *words: str) -> None:
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err[-2000:]
    assert all(w in err for w in words), err


@pytest.mark.parametrize("flags, words", [
    (["--jobs", "0"], ["--jobs", "positive"]),
    (["--jobs", "-1"], ["--jobs", "positive"]),
    (["--experiments"], ["--experiments names no experiment"]),
])
def test_bad_flags_are_one_line(flags, words, small_runs, tmp_path, monkeypatch, capsys):
    code, err = reproduce(monkeypatch, capsys, "--skip-runs", "--runs", str(small_runs), "--out", str(tmp_path / "o"),
                          *flags)
    assert code == 2
    assert_one_line(err, *words)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("runs", ["missing", "empty", "file"])
def test_skip_runs_needs_a_runs_folder_with_runs(runs, tmp_path, monkeypatch, capsys):
    path = tmp_path / runs
    if runs == "empty":
        path.mkdir()
    elif runs == "file":
        path.write_text("x")
    code, err = reproduce(monkeypatch, capsys, "--skip-runs", "--runs", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert_one_line(err, "--runs", str(path))


def test_an_out_file_is_rejected_before_any_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "o").write_text("x")
    code, err = reproduce(monkeypatch, capsys, "--dry-run", "--experiments", "motivation", "--runs", str(tmp_path / "r"),
                          "--out", str(tmp_path / "o"))
    assert code == 2
    assert_one_line(err, "--out", str(tmp_path / "o"))


@pytest.mark.parametrize("overrides, words", [
    (["backend.kv_pool_tokens=10"], ["KV pool 10"]),
    (["seed=abc"], ["seed must be"]),
    (["+sead=3"], ["'sead'"]),
    (["workload.load=-1"], ["workload.load"]),
])
def test_every_override_is_checked_before_the_first_run_and_by_dry_run(overrides, words, tmp_path, monkeypatch,
                                                                        capsys):
    for dry in (["--dry-run"], []):
        code, err = reproduce(monkeypatch, capsys, *dry, "--experiments", "motivation", "--runs", str(tmp_path / "r"),
                              "--out", str(tmp_path / "o"), "--", *overrides)
        assert code == 2
        assert_one_line(err, *words)
        assert not (tmp_path / "r").exists()


def test_dry_run_checks_a_real_engines_options(tmp_path, monkeypatch, capsys):
    code, err = reproduce(monkeypatch, capsys, "--dry-run", "--backend", "sglang", "--experiments", "main", "--runs",
                          str(tmp_path / "r"), "--out", str(tmp_path / "o"), "--", "backend.token_scale=5")
    assert code == 2
    assert_one_line(err, "token_scale")


def test_overrides_after_experiments_are_not_taken_for_experiments(tmp_path, monkeypatch, capsys):
    code, err = reproduce(monkeypatch, capsys, "--dry-run", "--experiments", "motivation", "seed=0", "--runs",
                          str(tmp_path / "r"), "--out", str(tmp_path / "o"))
    assert code == 2
    assert_one_line(err, "seed=0", "--experiments motivation -- seed=0")


def test_ctrl_c_is_one_line_and_status_130(tmp_path, monkeypatch, capsys):
    import topas.sweep

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(topas.sweep, "run_sweep", interrupted)
    code, err = reproduce(monkeypatch, capsys, "--experiments", "motivation", "--jobs", "1", "--runs",
                          str(tmp_path / "r"), "--out", str(tmp_path / "o"), "--", "workload.num_tasks=4")
    assert code == 130
    assert_one_line(err.splitlines()[-1], "interrupted")  # after the progress bar's line
    assert "Traceback" not in err


def test_a_full_disk_while_writing_the_report_is_one_line(small_runs, tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    p = subprocess.run([sys.executable, "-m", "topas.reproduce", "--grid", "quick", "--skip-runs", "--experiments",
                        "motivation", "--runs", str(small_runs), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, preexec_fn=limit)
    err = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    assert p.returncode == 2, p.stderr[-2000:]
    assert_one_line(err, str(tmp_path / "o"), "MiB free")
