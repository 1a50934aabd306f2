"""Node classification: cross-entropy over class logits, accuracy, class probabilities."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dsgraph.models.gnn import output_layer
from dsgraph.tasks.base import Task


class NodeClassification(Task):
    """One class per labelled node; ``target``: a tensor of class ids; ``out``: logits."""

    name = "node_classification"
    num_sums = 2
    selection_metric = "val_acc"

    def loss(self, out: torch.Tensor, target: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy of the logits (kept outside activation compression by the strategies:
        its backward reads the saved log-softmax non-linearly)."""
        return F.cross_entropy(out, target, reduction=reduction)

    def metric_sums(self, out: torch.Tensor, target: torch.Tensor) -> list[float]:
        """Correct predictions and rows."""
        return [float((out.argmax(1) == target).sum()), float(target.numel())]

    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Optional[float]]:
        """``<split>_acc`` (None for a split without rows)."""
        correct, rows = sums
        return {f"{split}_acc": correct / rows if rows else None}

    def outputs(self, out: torch.Tensor, index: dict[str, np.ndarray], target=None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``node_id`` (the input graph's ids), ``pred`` (class), ``prob`` (softmax of the
        logits, one column per class) and ``embedding``, sorted by node id."""
        (key, ids), = index.items()
        order = torch.from_numpy(np.argsort(ids, kind="stable"))
        cols = {key: np.asarray(ids)[order.numpy()].astype(np.int64),
                "pred": out[order].argmax(1).numpy().astype(np.int64),
                "prob": torch.softmax(out[order], 1).numpy()}
        if embedding is not None:
            cols["embedding"] = embedding[order].numpy()
        return cols

    @classmethod
    def check_outputs(cls, embeddings: bool, model_probe: Optional[torch.nn.Module]) -> None:
        """``--embeddings`` needs a model whose output layer can be found."""
        if embeddings and model_probe is not None:
            output_layer(model_probe)
