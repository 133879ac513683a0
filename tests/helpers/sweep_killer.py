"""A Hydra callback for tests: SIGKILLs the job process whose overrides contain a marker,
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
