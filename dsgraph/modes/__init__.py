"""The training modes, run by ``python -m train`` (the launcher, :mod:`dsgraph.cli.train`) and
``dsgraph.modes.worker`` (one process of a job); one strategy per mode, each a
:class:`dsgraph.trainer.Strategy`.

A new mode is its strategy module, its config section (:mod:`dsgraph.config.modes`, which
declares its facts: datasets, tasks, processes, whether it trains heterogeneous graphs) and one
line of :data:`MODES`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dsgraph.config.sections import mode_sections
from dsgraph.errors import ConfigError
from dsgraph.memplan import MemoryPlan
from dsgraph.partition.meta import partitions_are_hetero
from dsgraph.trainer import Strategy
from dsgraph.modes.dsmpnn import DsmpnnStrategy
from dsgraph.modes.sampled import SampledStrategy
from dsgraph.modes.sar import SarStrategy

if TYPE_CHECKING:
    from dsgraph.config import Config

# train.mode -> the Strategy class that runs it.
MODES: dict[str, type[Strategy]] = {"sampled": SampledStrategy, "sar": SarStrategy,
                                    "dsmpnn": DsmpnnStrategy}


def strategy_class(cfg: "Config") -> type[Strategy]:
    """The Strategy class that runs ``cfg``'s ``train.mode`` (each picks its source by what the
    task trains on), refused where the mode cannot train its partitions' kind of graph."""
    mode, section = cfg.train.mode, cfg.mode_section
    if section.PARTITIONED and not section.HETERO and partitions_are_hetero(cfg):
        hetero = [s.MODE for s in mode_sections(cfg) if s.HETERO]
        raise ConfigError(f"{cfg.source}: train.mode: heterogeneous graphs train in "
                          f"{', '.join(map(repr, hetero))}, got {mode!r}")
    return MODES[mode]


def plan_job(cfg: "Config") -> MemoryPlan:
    """The memory plan of ``cfg``'s training job, by its mode's memory model."""
    return strategy_class(cfg).plan_memory(cfg)
