"""Run one experiment (or a Hydra multirun sweep with -m).

    python run.py scheduler=lpm workload=metagpt_tl gpu=h100_80gb model=llama3_1_8b
    python run.py workload.load=0.7 hydra.run.dir=/tmp/x      # outputs in Hydra's job output dir

Bad input (unknown group value, malformed override, invalid parameter, a call that can never
fit the KV pool, an output folder that cannot be written) prints one line starting with
"error:" and exits with status 2, before anything runs. TOPAS_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

import hydra
from omegaconf import DictConfig

import topas.config  # noqa: F401  (registers the resolvers used in conf/config.yaml)
from topas.errors import one_line

CONF_DIR = str(Path(__file__).resolve().parent / "conf")
log = logging.getLogger("topas")

def _fail(e: BaseException) -> None:
    if os.environ.get("TOPAS_DEBUG"):
        raise e
    print(f"error: {one_line(e)}", file=sys.stderr)
    sys.exit(2)


def precheck(argv: list[str]) -> None:
    """Validate a single run fully before Hydra creates its output folder, so bad input is one
    clear line and nothing is written. Hydra's own flags (-m, -c, --info, -sc, ...) skip this:
    Hydra handles them, and a sweep records each failing point instead."""
    if any(a.startswith("-") for a in argv):
        return
    from hydra import compose, initialize_config_dir

    from topas.runner import check_output_dir, prepare

    try:
        with initialize_config_dir(version_base=None, config_dir=CONF_DIR):
            cfg = compose(config_name="config", overrides=argv, return_hydra_config=True)
        check_output_dir(Path(cfg.hydra.run.dir))
        prepare(cfg)
    except Exception as e:  # noqa: BLE001 - any failure here is the user's input
        _fail(e)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from topas.process_guard import exit_with_parent
    from topas.results import clear_outcome, is_complete
    from topas.runner import fingerprint_of, run
    from topas.sweep import record_outcome

    exit_with_parent()
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    sweeping = hc.mode == RunMode.MULTIRUN
    if sweeping and is_complete(out, fingerprint_of(cfg)):
        log.info(f"complete, skipped: {out}")  # a resumed sweep runs only what is missing (same code and config)
        record_outcome(cfg.sweep_manifest, hc.overrides.task, out, "cached")
        return
    try:
        run(cfg, out_dir=out)
        record_outcome(cfg.sweep_manifest, hc.overrides.task, out, "ok")
    except Exception as e:  # noqa: BLE001
        if not sweeping:
            if isinstance(e, ValueError):  # ConfigError, UnknownPolicyError, WorkflowError, bad workload parameters
                _fail(e)
            raise
        # a failed point is recorded (error.txt, the manifest) and does not stop the sweep
        clear_outcome(out)
        (out / "error.txt").write_text(f"{' '.join(hc.overrides.task)}\n{traceback.format_exc()}")
        log.error(f"failed: {out}: {one_line(e)}")
        record_outcome(cfg.sweep_manifest, hc.overrides.task, out, "failed", one_line(e))


if __name__ == "__main__":
    from topas.process_guard import exit_with_parent

    exit_with_parent()  # the multirun's launcher process; each job process watches its own parent
    precheck(sys.argv[1:])
    main()
