"""Field regression (DS-MPNN): squared error, RMSE and relative L2, predicted fields."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from dsgraph.errors import UserError
from dsgraph.tasks.base import Task


@dataclass
class FieldTarget:
    """The solution fields a prediction is scored against: standardized (``y``, the training
    units), physical (``y_raw``) and the map from the first to the second (``decode``)."""

    y: np.ndarray  # (N, M, C): N fields of M points, C channels
    y_raw: np.ndarray
    decode: Callable[[np.ndarray], np.ndarray]


class FieldRegression(Task):
    """Per-point field values; ``out`` in standardized units. Training ``target``: a tensor
    like ``out``; evaluation and outputs: a :class:`FieldTarget` of whole fields."""

    facts_of = "field_regression"
    num_sums = 4
    selection_metric = None  # test figures only: no validation split to pick a best model

    def loss(self, out: torch.Tensor, target: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Squared error (``sum``; ``mean`` over every value)."""
        err = ((out - target.to(out.dtype)) ** 2).sum()
        return err if reduction == "sum" else err / target.numel()

    def metric_sums(self, out: np.ndarray, target: FieldTarget) -> list[float]:
        """Squared error and value count (standardized units); relative L2 errors (physical
        units) and field count."""
        err = np.linalg.norm((target.decode(out) - target.y_raw).reshape(len(out), -1), axis=1)
        ref = np.linalg.norm(target.y_raw.reshape(len(out), -1), axis=1)
        # A zero solution field has no relative error; it counts by its absolute one.
        rel = err / np.where(ref > 0, ref, 1.0)
        return [float(np.sum((out - target.y) ** 2)), float(out.size), float(np.sum(rel)),
                float(len(out))]

    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Optional[float]]:
        """``<split>_rmse`` (standardized units, all channels) and ``<split>_rel_l2`` (mean
        over fields of ||pred - u|| / ||u||, physical units)."""
        se, values, rel, fields = sums
        return {f"{split}_rmse": float(np.sqrt(se / values)) if values else None,
                f"{split}_rel_l2": rel / fields if fields else None}

    def outputs(self, out: np.ndarray, index: dict[str, np.ndarray],
                target: Optional[FieldTarget] = None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``index`` (``sample``, ``node``, ``pos``), then ``pred`` and ``target`` in physical
        units, one row per point, one column per channel."""
        assert target is not None, "field outputs are written beside their targets"
        rows = out.shape[0] * out.shape[1]
        return {**index, "pred": target.decode(out).reshape(rows, -1),
                "target": target.y_raw.reshape(rows, -1)}

    @classmethod
    def check_outputs(cls, embeddings: bool, model_probe: Optional[torch.nn.Module]) -> None:
        """Fields have no node embeddings to export."""
        if embeddings:
            raise UserError("--embeddings: field_regression runs (DS-MPNN) export predicted "
                            "fields only")
