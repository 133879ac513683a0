"""Hydra callbacks for tests: `KillJob` SIGKILLs the job process whose overrides contain a marker,
as an out-of-memory kill would (`+hydra.callbacks.killer._target_=tests.helpers.sweep_killer.KillJob`)."""

from __future__ import annotations

import os
import signal
from typing import Any

from hydra.experimental.callback import Callback


class KillJob(Callback):
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        if self.marker in HydraConfig.get().overrides.task:
            os.kill(os.getpid(), signal.SIGKILL)


class FailJob(Callback):
    """Makes the engine of every job whose overrides contain `marker` (a substring) raise, as a crash in the
    middle of a run would: the job fails inside the run, after its input was checked
    (`+hydra.callbacks.fail._target_=tests.helpers.sweep_killer.FailJob +hydra.callbacks.fail.marker=seed=1`)."""

    def __init__(self, marker: str) -> None:
        self.marker = str(marker)

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        import topas.engines.sim.backend as backend

        self.original = backend.run_sim
        if any(self.marker in o for o in HydraConfig.get().overrides.task):
            def crash(ctx: Any) -> Any:
                raise RuntimeError(f"engine died (tests.helpers.sweep_killer.FailJob, {self.marker})")

            backend.run_sim = crash

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        import topas.engines.sim.backend as backend

        backend.run_sim = self.original  # the launcher may run the next job in this process
