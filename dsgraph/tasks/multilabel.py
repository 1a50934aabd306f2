"""Multi-label node classification: binary cross-entropy per label; ROC-AUC (as OGB scores
ogbn-proteins), micro and macro F1; per-label probabilities and 0/1 predictions."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dsgraph import dist
from dsgraph.tasks.node import NodeTask, loss_weights


def probabilities(out: Any) -> np.ndarray:
    """Per-label probabilities of logits, as ``python -m predict`` exports them (float32), so a
    score computed from either agrees: computed in float64, whose last-bit differences between
    vectorized and scalar kernels (batches of other sizes) do not survive the rounding."""
    return torch.sigmoid(torch.as_tensor(out).double()).float().numpy()


class Multilabel(NodeTask):
    """L independent 0/1 labels per labelled node; ``target``: a float tensor (rows x L) of 0/1;
    ``out``: one logit per label. A label is predicted where its probability is > 0.5.

    Sums per split: rows, then per label the true positives, predicted and true positives
    (micro and macro F1 exactly over all ranks); ROC-AUC from every rank's rows.
    """

    facts_of = "multilabel"
    num_sums = 1  # + 3 per label once bound
    selection_metric = "val_rocauc"
    gathers_rows = True
    weight: Optional[torch.Tensor] = None  # per label, of its positives (BCE pos_weight)

    def bind(self, width: int, train_targets: Optional[Callable[[], Any]] = None) -> None:
        """``width`` labels; weights of their positives (``balanced``: negatives / positives
        over every rank's training nodes, PyTorch's ``pos_weight`` rule)."""
        super().bind(width)
        self.num_sums = 1 + 3 * width
        self.weight = loss_weights(self.cfg.class_weights, width, "label",
                                   lambda: self._balanced(train_targets()))

    def _balanced(self, target: torch.Tensor) -> np.ndarray:
        t = target.double()
        got = np.asarray(dist.all_sum([float(len(t)), *t.sum(0).tolist()]))
        rows, positives = got[0], got[1:]
        # A label without training positives has no positive term to weigh.
        return np.where(positives > 0, (rows - positives) / np.maximum(positives, 1), 1.0)

    def loss(self, out: torch.Tensor, target: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Binary cross-entropy of the logits, averaged over the labels of a row (positives
        weighted per ``task.class_weights``); summed (``sum``) or averaged (``mean``) over
        rows."""
        weight = None if self.weight is None else self.weight.to(out.dtype)
        per_row = F.binary_cross_entropy_with_logits(out, target.to(out.dtype), pos_weight=weight,
                                                     reduction="none").mean(1)
        return per_row.sum() if reduction == "sum" else per_row.mean()

    def metric_sums(self, out: torch.Tensor, target: torch.Tensor) -> list[float]:
        """Rows; per label: true positives, predicted positives, true positives."""
        pred, true = (out > 0).double(), (target > 0.5).double()
        return [float(len(true)), *(pred * true).sum(0).tolist(), *pred.sum(0).tolist(),
                *true.sum(0).tolist()]

    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Optional[float]]:
        """``<split>_micro_f1`` and ``<split>_macro_f1`` (every label counts; one that is
        neither predicted nor present scores 0, as scikit-learn's ``f1_score``); None for a
        split without rows."""
        rows = sums[0]
        if not rows:
            return {f"{split}_micro_f1": None, f"{split}_macro_f1": None}
        tp, predicted, labelled = np.asarray(sums[1:], dtype=np.float64).reshape(3, -1)
        both = predicted + labelled
        micro = 2 * tp.sum() / both.sum() if both.sum() else 0.0
        per_label = np.where(both > 0, 2 * tp / np.where(both > 0, both, 1.0), 0.0)
        return {f"{split}_micro_f1": float(micro), f"{split}_macro_f1": float(per_label.mean())}

    def row_metrics(self, out: np.ndarray, target: np.ndarray, split: str) -> dict[str, Any]:
        """``<split>_rocauc``: ROC-AUC per label averaged over the labels with both classes
        among the split's rows (OGB's ogbn-proteins evaluator); None when no label has."""
        from sklearn.metrics import roc_auc_score  # heavy import: evaluation only

        prob, true = probabilities(out), np.asarray(target) > 0.5
        scores = [roc_auc_score(true[:, i], prob[:, i]) for i in range(true.shape[1])
                  if true[:, i].any() and not true[:, i].all()]
        return {f"{split}_rocauc": float(np.mean(scores)) if scores else None}

    def outputs(self, out: torch.Tensor, index: dict[str, np.ndarray], target=None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``node_id``, ``prob`` (one column per label), ``pred`` (0/1 per label: probability
        > 0.5) and ``embedding``, sorted by node id."""
        key, ids, order = self.sorted_index(index)
        logits = out[order]
        cols = {key: ids, "prob": probabilities(logits),
                "pred": (logits > 0).numpy().astype(np.int8)}
        if embedding is not None:
            cols["embedding"] = embedding[order].numpy()
        return cols
