"""Training entry points: ``python -m train`` (the launcher) and ``train.worker`` (one process of
a job); one strategy module per mode, each a :class:`dsgraph.trainer.Strategy`.

A new mode is its strategy module, its config section (:mod:`dsgraph.config.modes`) and one
line of :data:`MODES`."""
from __future__ import annotations

import importlib

# train.mode -> the Strategy class that runs it ("module:Class", imported when used).
MODES = {"sampled": "train.sampled:SampledStrategy", "sar": "train.sar:SarStrategy",
         "dsmpnn": "train.dsmpnn:DsmpnnStrategy"}


def strategy_class(mode: str) -> type:
    """The Strategy class of ``train.mode``."""
    module, name = MODES[mode].split(":")
    return getattr(importlib.import_module(module), name)
