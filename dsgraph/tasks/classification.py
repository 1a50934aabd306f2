"""Node classification: cross-entropy over class logits; accuracy, macro and per-class F1;
class probabilities."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dsgraph import dist
from dsgraph.tasks.node import NodeTask, loss_weights


class NodeClassification(NodeTask):
    """One class per labelled node; ``target``: a tensor of class ids; ``out``: logits.

    Sums per split: correct predictions, rows, then per class the true positives, the
    predictions and the true labels of that class, from which F1 is exact over all ranks.
    """

    facts_of = "node_classification"
    num_sums = 2  # + 3 per class once bound
    selection_metric = "val_acc"
    weight: Optional[torch.Tensor] = None  # per class (task.class_weights), set by bind

    def target(self, label: torch.Tensor) -> torch.Tensor:
        """Class ids as int64 (what cross-entropy takes)."""
        return label.long()

    def bind(self, width: int, train_targets: Optional[Callable[[], Any]] = None) -> None:
        """``width`` classes; class weights (``balanced``: n / (classes * count_c) over every
        rank's training nodes, sklearn's ``compute_class_weight`` rule)."""
        super().bind(width)
        self.num_sums = 2 + 3 * width
        self.weight = loss_weights(self.cfg.class_weights, width, "class",
                                   lambda: self._balanced(train_targets()))

    def _balanced(self, target: torch.Tensor) -> np.ndarray:
        counts = np.asarray(dist.all_sum(torch.bincount(target.long(), minlength=self.width)
                                         .tolist()))
        # A class without training nodes never weighs a loss term: any finite weight does.
        return np.where(counts > 0, counts.sum() / (self.width * np.maximum(counts, 1)), 1.0)

    def loss(self, out: torch.Tensor, target: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy of the logits, class-weighted per ``task.class_weights`` (kept outside
        activation compression by the strategies: its backward reads the saved log-softmax
        non-linearly); ``mean`` divides the (weighted) sum by the rows."""
        if self.weight is None:
            return F.cross_entropy(out, target, reduction=reduction)
        total = F.cross_entropy(out, target, weight=self.weight.to(out.dtype), reduction="sum")
        return total if reduction == "sum" else total / max(target.numel(), 1)

    def metric_sums(self, out: torch.Tensor, target: torch.Tensor) -> list[float]:
        """Correct predictions, rows; per class: true positives, predictions, labels."""
        pred = out.argmax(1)
        correct = pred == target
        sums = [float(correct.sum()), float(target.numel())]
        if self.width is not None:
            k = self.width
            for ids in (target[correct], pred, target):
                sums += torch.bincount(ids, minlength=k)[:k].double().tolist()
        return sums

    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Any]:
        """``<split>_acc``; with the class count bound, ``<split>_macro_f1`` (over the classes
        that occur among the labels or predictions, as scikit-learn averages) and
        ``<split>_f1_per_class`` (None for a class that does not occur); None for a split
        without rows."""
        correct, rows = sums[0], sums[1]
        out: dict[str, Any] = {f"{split}_acc": correct / rows if rows else None}
        if self.width is None:
            return out
        tp, predicted, labelled = np.asarray(sums[2:], dtype=np.float64).reshape(3, -1)
        seen = predicted + labelled > 0
        f1 = np.where(seen, 2 * tp / np.where(seen, predicted + labelled, 1.0), np.nan)
        out[f"{split}_macro_f1"] = float(f1[seen].mean()) if rows and seen.any() else None
        out[f"{split}_f1_per_class"] = ([None if np.isnan(v) else float(v) for v in f1]
                                        if rows else None)
        return out

    def outputs(self, out: torch.Tensor, index: dict[str, np.ndarray], target=None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``node_id`` (the input graph's ids), ``pred`` (class), ``prob`` (softmax of the
        logits, one column per class) and ``embedding``, sorted by node id."""
        key, ids, order = self.sorted_index(index)
        cols = {key: ids, "pred": out[order].argmax(1).numpy().astype(np.int64),
                "prob": torch.softmax(out[order], 1).numpy()}
        if embedding is not None:
            cols["embedding"] = embedding[order].numpy()
        return cols
