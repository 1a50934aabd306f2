"""Training entry points: ``python -m train`` (the launcher) and ``train.worker`` (one process of
a job); one strategy module per mode, each a :class:`dsgraph.trainer.Strategy`.

A new mode is its strategy module, its config section (:mod:`dsgraph.config.modes`) and one
line of :data:`MODES`."""
from __future__ import annotations

import importlib
from typing import Optional

# train.mode -> the Strategy class that runs it ("module:Class", imported when used).
MODES = {"sampled": "train.sampled:SampledStrategy", "sar": "train.sar:SarStrategy",
         "dsmpnn": "train.dsmpnn:DsmpnnStrategy"}


# (train.mode, task.name) -> the Strategy class when a task needs its own (edge batches, say).
TASK_STRATEGIES = {("sampled", "link_prediction"): "train.sampled_link:LinkSampledStrategy",
                   ("sar", "link_prediction"): "train.sar_link:SarLinkStrategy"}


def strategy_class(mode: str, task: Optional[str] = None) -> type:
    """The Strategy class of ``train.mode`` running task ``task`` (a resolved task name)."""
    module, name = TASK_STRATEGIES.get((mode, task), MODES[mode]).split(":")
    return getattr(importlib.import_module(module), name)
