"""Node targets for SAR: the labelled nodes of each worker's partition, the loss over its
training nodes divided by their global count."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from dsgraph import dist
from dsgraph.errors import DataError
from dsgraph.tasks.evaluation import split_figures
from dsgraph.trainer import Trainer
from dsgraph.modes.sar.source import FullGraphSource

SPLITS = ("train", "val", "test")


class NodeTargets(FullGraphSource):
    """The labelled nodes of the worker's partition: the loss over its training nodes."""

    def setup(self, trainer: Trainer) -> nn.Module:
        """Labels and split masks; the task bound to the labels' width."""
        nd = self.w.part.ndata
        self.task.check_labels(nd["label"].dtype, str(self.part_json))
        self.label = self.task.target(nd["label"])
        self.masks = {k: self.w.local_mask(f"{k}_mask") for k in SPLITS}
        self.counts = dict(zip(SPLITS, dist.all_sum([float(m.sum()) for m in self.masks.values()])))
        if self.counts["train"] == 0:
            raise DataError(f"{self.part_json}: no node has train_mask set")
        self.task.bind(self._label_width(), lambda: self.label[self.masks["train"]])
        return trainer.build_model(self.x.shape[1], self.task.head_width(self.task.width))

    def _label_width(self) -> int:
        """Targets per node (float labels), or classes: the largest class id on any worker + 1."""
        if self.label.dtype.is_floating_point:
            return int(self.label.shape[1]) if self.label.dim() > 1 else 1
        top = float(self.label.max()) if self.label.numel() else 0.0
        return int(dist.all_max([top])[0]) + 1

    def loss(self, trainer: Trainer, h: torch.Tensor,
             epoch: int) -> tuple[torch.Tensor, float, list[float]]:
        """The task's loss of the training nodes, summed and divided by their global count."""
        tr = self.masks["train"]
        loss = self.task.loss(h[tr], self.label[tr], "sum") / self.counts["train"]
        return loss, loss.item(), self.task.metric_sums(h.detach()[tr], self.label[tr])

    def record(self, sums: list[float]) -> dict[str, Any]:
        """The task's training metrics."""
        return self.task.metrics(sums, "train")

    def evaluate(self, trainer: Trainer, h: torch.Tensor) -> dict[str, Any]:
        """The task's metrics on the validation and test nodes."""
        return split_figures(self.task, {k: (h[self.masks[k]], self.label[self.masks[k]])
                                         for k in SPLITS[1:]})

    def predict(self, trainer: Trainer, embeddings: bool,
                pairs: Optional[np.ndarray]) -> Optional[dict[str, Any]]:
        """Every node's outputs (:meth:`node_outputs`)."""
        return self.node_outputs(trainer, embeddings)
