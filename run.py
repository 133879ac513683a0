"""Run one experiment (or a Hydra multirun sweep with -m).

    python run.py scheduler=lpm workload=metagpt_tl gpu=h100_80gb model=llama3_1_8b

Bad input (unknown group value, malformed override, invalid parameter) prints one
line starting with "error:" and exits with status 2. TOPAS_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import hydra
from omegaconf import DictConfig

import topas.config  # noqa: F401  (registers the resolvers used in conf/config.yaml)

CONF_DIR = str(Path(__file__).resolve().parent / "conf")


_NOISE = ("full_key", "object_type", "provider=", "Config search path", "Set the environment variable")


def _one_line(e: BaseException) -> str:
    """Hydra/OmegaConf errors span several lines; keep the informative ones on one."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip() and not ln.strip().startswith(_NOISE)]
    if not lines:
        return type(e).__name__
    if any(ln.startswith("Available options") for ln in lines):
        i = next(i for i, ln in enumerate(lines) if ln.startswith("Available options"))
        return f"{' '.join(lines[:i])}; available: {', '.join(lines[i + 1:])}"
    return "; ".join(lines)


def _fail(e: BaseException) -> None:
    if os.environ.get("TOPAS_DEBUG"):
        raise e
    print(f"error: {_one_line(e)}", file=sys.stderr)
    sys.exit(2)


def precheck(argv: list[str]) -> None:
    """Compose the config once before Hydra does, so a bad override is one clear line."""
    if any(a in ("-m", "--multirun") for a in argv) or any(a.startswith("--") for a in argv):
        return  # sweeps and Hydra's own flags: Hydra reports
    from hydra import compose, initialize_config_dir

    overrides = [a for a in argv if not a.startswith("hydra.") and not a.startswith("-")]
    try:
        with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
            compose(config_name="config", overrides=overrides)
    except Exception as e:  # noqa: BLE001 - any composition failure is the user's input
        _fail(e)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from topas.results import is_complete
    from topas.runner import fingerprint_of, run

    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    if sweeping and is_complete(cfg.out_dir, fingerprint_of(cfg)):
        print(f"complete, skipped: {cfg.out_dir}")  # a resumed sweep runs only what is missing (same code and config)
        return
    try:
        run(cfg)
    except Exception as e:  # noqa: BLE001
        if not sweeping:
            if isinstance(e, ValueError):  # ConfigError, UnknownPolicyError, WorkflowError, bad workload parameters
                _fail(e)
            raise
        # a failed point is recorded and does not stop the sweep
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.txt").write_text(traceback.format_exc())
        print(f"failed: {cfg.out_dir}: {_one_line(e)}", file=sys.stderr)


if __name__ == "__main__":
    precheck(sys.argv[1:])
    main()
