"""Node regression: squared error over float targets; RMSE, MAE and R²; predicted values."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from dsgraph.tasks.node import NodeTask, as_float64


class NodeRegression(NodeTask):
    """One or more float targets per labelled node; ``target``: a float tensor (rows x
    targets); ``out``: the predicted values, in the targets' units.

    Sums per split: rows, then per target the sum and the sum of squares of the targets, the
    squared and the absolute errors; RMSE, MAE and R² follow exactly over all ranks.
    """

    facts_of = "node_regression"
    num_sums = 1  # + 4 per target once bound
    selection_metric = "val_rmse"
    lower_is_better = True

    def bind(self, width: int, train_targets: Optional[Callable[[], Any]] = None) -> None:
        """``width`` targets per node."""
        super().bind(width)
        self.num_sums = 1 + 4 * width

    def loss(self, out: torch.Tensor, target: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Squared error, averaged over the targets of a row; summed (``sum``) or averaged
        (``mean``) over rows."""
        per_row = ((out - target.to(out.dtype)) ** 2).mean(1)
        return per_row.sum() if reduction == "sum" else per_row.mean()

    def metric_sums(self, out: torch.Tensor, target: torch.Tensor) -> list[float]:
        """Rows; per target: sum of targets, of their squares, of squared and absolute
        errors."""
        o, t = as_float64(out), as_float64(target)
        err = o - t
        return [float(len(t)), *t.sum(0).tolist(), *(t ** 2).sum(0).tolist(),
                *(err ** 2).sum(0).tolist(), *np.abs(err).sum(0).tolist()]

    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Optional[float]]:
        """``<split>_rmse`` and ``<split>_mae`` over every value, ``<split>_r2`` averaged over
        the targets (scikit-learn's ``r2_score``: a constant target scores 1 if predicted
        exactly, else 0); None for a split without rows."""
        rows = sums[0]
        if not rows:
            return {f"{split}_rmse": None, f"{split}_mae": None, f"{split}_r2": None}
        total, squares, sse, sae = np.asarray(sums[1:], dtype=np.float64).reshape(4, -1)
        sst = squares - total ** 2 / rows
        r2 = np.where(sst > 0, 1 - sse / np.where(sst > 0, sst, 1.0),
                      np.where(sse == 0, 1.0, 0.0))
        values = rows * len(sse)
        return {f"{split}_rmse": float(np.sqrt(sse.sum() / values)),
                f"{split}_mae": float(sae.sum() / values), f"{split}_r2": float(r2.mean())}

    def outputs(self, out: torch.Tensor, index: dict[str, np.ndarray], target=None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``node_id``, ``pred`` (one column per target) and ``embedding``, sorted by node
        id."""
        key, ids, order = self.sorted_index(index)
        cols = {key: ids, "pred": out[order].numpy()}
        if embedding is not None:
            cols["embedding"] = embedding[order].numpy()
        return cols
