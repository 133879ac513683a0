"""Setup shared by the tests in tests/sglang (imported by name: pytest puts this folder on
sys.path). Not a conftest.py: tests/conftest.py is imported as `conftest` by other tests,
and a second one here would shadow it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")

def require_sglang() -> None:
    """Call at the top of a test module that needs the real sglang package (before importing
    it). Without sglang in the venv (`make sglang-cpu` installs it) the module is skipped,
    unless TOPAS_REQUIRE_SGLANG=1 (set by `make test` / `make test-sglang`, meant for CI):
    then it is an error. Sets SGLANG_USE_CPU_ENGINE=1 for in-process sglang imports."""
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if importlib.util.find_spec("sglang.srt") is None:
        if os.environ.get("TOPAS_REQUIRE_SGLANG") == "1":
            raise RuntimeError("sglang is not installed (TOPAS_REQUIRE_SGLANG=1): run `make sglang-cpu`")
        pytest.skip("sglang is not installed in this venv: run `make sglang-cpu`", allow_module_level=True)


def compose_cfg(*overrides: str):
    """The project's Hydra config (conf/) with `overrides`, no logger, no progress bar."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base=None, config_dir=CONF):
        return compose(config_name="config", overrides=["logger=none", "progress=false", *overrides])
