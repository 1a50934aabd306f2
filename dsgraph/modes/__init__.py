"""The training modes, run by ``python -m train`` (the launcher, :mod:`dsgraph.cli.train`) and
``dsgraph.modes.worker`` (one process of a job); one strategy module per mode, each a
:class:`dsgraph.trainer.Strategy`.

A new mode is its strategy module, its config section (:mod:`dsgraph.config.modes`) and one
line of :data:`MODES`."""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from dsgraph.errors import ConfigError

if TYPE_CHECKING:
    from dsgraph.config import Config

# train.mode -> the Strategy class that runs it ("module:Class", imported when used).
MODES = {"sampled": "dsgraph.modes.sampled:SampledStrategy", "sar": "dsgraph.modes.sar:SarStrategy",
         "dsmpnn": "dsgraph.modes.dsmpnn:DsmpnnStrategy"}


# (train.mode, task.name) -> the Strategy class when a task needs its own (edge batches, say).
TASK_STRATEGIES = {("sampled", "link_prediction"): "dsgraph.modes.sampled_link:LinkSampledStrategy",
                   ("sar", "link_prediction"): "dsgraph.modes.sar_link:SarLinkStrategy"}


# train.mode -> the Strategy class of heterogeneous graphs (partitions with several node types).
HETERO_STRATEGIES = {"sampled": "dsgraph.modes.sampled_hetero:HeteroSampledStrategy"}
HETERO_TASKS = ("node_classification",)


def strategy_class(cfg: "Config") -> type:
    """The Strategy class that runs ``cfg``: its ``train.mode``, the task it trains and whether
    its partitions hold a heterogeneous graph."""
    mode, task = cfg.train.mode, cfg.task_name
    target = TASK_STRATEGIES.get((mode, task), MODES[mode])
    if mode in ("sampled", "sar") and partitions_are_hetero(cfg):
        if mode not in HETERO_STRATEGIES:
            raise ConfigError(f"{cfg.source}: train.mode: heterogeneous graphs train in "
                              f"{', '.join(map(repr, HETERO_STRATEGIES))}, got {mode!r}")
        if task not in HETERO_TASKS:
            raise ConfigError(f"{cfg.source}: task.name: heterogeneous graphs train "
                              f"{', '.join(map(repr, HETERO_TASKS))}, got {task!r}")
        target = HETERO_STRATEGIES[mode]
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def partitions_are_hetero(cfg: "Config") -> bool:
    """Whether the run's partition JSON lists several node or edge types (False while it does
    not exist or cannot be read: the strategy's prepare reports that)."""
    path = Path(cfg.partition.out_dir) / f"{cfg.partition.graph_name}.json"
    try:
        meta = json.loads(path.read_text())
        return len(meta["ntypes"]) > 1 or len(meta["etypes"]) > 1
    except (OSError, ValueError, KeyError, TypeError):
        return False
