"""A task's figures of evaluated splits over every rank: sums added up, rows gathered where a
metric needs them all."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dsgraph import dist
from dsgraph.tasks.base import Task


def _numpy(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def split_figures(task: Task, parts: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The task's ``<split>_<metric>`` figures of every split in ``parts`` (split -> this
    rank's outputs and targets), over all ranks; the same dict on every rank (collective).

    Sums (:meth:`Task.metric_sums`) are added over ranks; for a task that
    :attr:`~Task.gathers_rows`, rank 0 also gathers every rank's rows, computes
    :meth:`Task.row_metrics` and sends the figures back.
    """
    sums = dist.all_sum([v for out, target in parts.values()
                         for v in task.metric_sums(out, target)])
    figures = task.split_metrics(sums, list(parts))
    if not task.gathers_rows:
        return figures
    everyone = dist.gather_to_root({split: (_numpy(out), _numpy(target))
                                    for split, (out, target) in parts.items()})
    rows: dict[str, Any] = {}
    if everyone is not None:
        for split in parts:
            out = np.concatenate([p[split][0] for p in everyone])
            target = np.concatenate([p[split][1] for p in everyone])
            rows.update(task.row_metrics(out, target, split))
    figures.update(dist.broadcast_value(rows))
    return figures
