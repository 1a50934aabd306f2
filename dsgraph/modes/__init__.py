"""The training modes, run by ``python -m train`` (the launcher, :mod:`dsgraph.cli.train`) and
``dsgraph.modes.worker`` (one process of a job); one strategy module per mode, each a
:class:`dsgraph.trainer.Strategy`.

A new mode is its strategy module, its config section (:mod:`dsgraph.config.modes`) and one
line of :data:`MODES`."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dsgraph.errors import ConfigError
from dsgraph.partition.meta import partitions_are_hetero
from dsgraph.tasks import task_class

if TYPE_CHECKING:
    from dsgraph.config import Config

# train.mode -> the Strategy class that runs it ("module:Class", imported when used).
MODES = {"sampled": "dsgraph.modes.sampled:SampledStrategy", "sar": "dsgraph.modes.sar:SarStrategy",
         "dsmpnn": "dsgraph.modes.dsmpnn:DsmpnnStrategy"}


# (train.mode, what the task trains on) -> the Strategy class when that needs its own.
TASK_STRATEGIES = {("sar", "links"): "dsgraph.modes.sar_link:SarLinkStrategy"}

# The modes that train partitioned graphs, and those of them that train heterogeneous ones.
GRAPH_MODES, HETERO_MODES = ("sampled", "sar"), ("sampled",)


def strategy_class(cfg: "Config") -> type:
    """The Strategy class that runs ``cfg``: its ``train.mode``, what its task trains on and
    whether its partitions hold a heterogeneous graph."""
    mode = cfg.train.mode
    if mode in GRAPH_MODES and mode not in HETERO_MODES and partitions_are_hetero(cfg):
        raise ConfigError(f"{cfg.source}: train.mode: heterogeneous graphs train in "
                          f"{', '.join(map(repr, HETERO_MODES))}, got {mode!r}")
    target = TASK_STRATEGIES.get((mode, task_class(cfg.task_name).trains_on), MODES[mode])
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
