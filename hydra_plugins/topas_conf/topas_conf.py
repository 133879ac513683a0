"""The config nodes Hydra composes from code, each default written once, in a dataclass:

- `scheduler/schema/<name>`: every registered scheduler's parameter defaults, from its Params dataclass
  (topas.policy.registry.config_node); conf/scheduler/<name>.yaml composes it and adds its tuned values;
- `backend/schema/sim`: the sim backend's options, from SimBackendConfig (topas.engines.sim.config.hydra_node);
  conf/backend/sim.yaml composes it;
- the `scheduler_set` resolver of the experiment grids (topas/scheduler_sets.py).

Hydra imports every module of `hydra_plugins` when it starts (any `run.py`, multirun job or `compose`), so the
nodes are in its config store before the first config is composed, whoever composes it. Subgroups, so
`scheduler=` and `backend=` (and a `glob(*)` over them) offer only the config files.
"""
# no `from __future__ import annotations`: Hydra loads plugin modules outside sys.modules (see topas_sweeper)

from hydra.core.config_store import ConfigStore

import topas.scheduler_sets  # noqa: F401 - registers `scheduler_set`, the resolver of conf/experiment/*.yaml
from topas.engines.sim.config import hydra_node
from topas.policy.registry import builtin_policy_names, config_node

_store = ConfigStore.instance()
_store.store(group="backend/schema", name="sim", node=hydra_node(), provider="topas")
for _name in builtin_policy_names():
    _store.store(group="scheduler/schema", name=_name, node=config_node(_name), provider="topas")
