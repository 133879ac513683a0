"""Hydra's basic sweeper without its up-front composition of every job (`hydra/sweeper=unchecked_basic`).

Hydra's BasicSweeper composes the config of every job of a batch in the launching process before it
launches any (`validate_batch_is_legal`, "can be a bit slow for large jobs"); every job composes its
config again in its worker. With a parallel launcher that first pass is serial and leaves the workers
idle: ~0.1 s per job, minutes for a reproduce grid of thousands of runs. topas.reproduce and
topas.tuning select this sweeper: they check their overrides before the sweep, and a job whose config
fails to compose is reported as failed by the sweep's manifest (topas/sweep.py). A plain
`python run.py -m` keeps Hydra's own sweeper.
"""
# no `from __future__ import annotations`: Hydra loads plugin modules outside sys.modules, where a dataclass
# cannot resolve string annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class UncheckedBasicSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.topas_sweeper.topas_sweeper.UncheckedBasicSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="unchecked_basic", node=UncheckedBasicSweeperConf, provider="topas")


class UncheckedBasicSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Nothing: each job composes (and so checks) its own config where it runs."""
