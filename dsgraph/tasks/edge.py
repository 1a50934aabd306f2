"""Edge tasks: a class or values per labelled edge, scored from its endpoints' embeddings.

The model's output is each node's embedding; an edge head (:class:`EdgeHead`, a submodule of the
model, so DDP, Adam and checkpoints carry it) maps the two endpoints' embeddings to the task's
output row. Loss, metrics and outputs are the node tasks' over edge rows: accuracy and F1
(``edge_classification``), RMSE, MAE and R² (``edge_regression``). Predictions are keyed by the
edge's position in the user's edge list (``edge_id``) and its endpoints (``src``, ``dst``).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from dsgraph.errors import ConfigError, DataError
from dsgraph.tasks.classification import NodeClassification
from dsgraph.tasks.node_regression import NodeRegression


class EdgeHead(nn.Module):
    """``[h_src, h_dst, h_src * h_dst]`` through a two-layer perceptron to ``out_width``."""

    def __init__(self, width: int, out_width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3 * width, width), nn.ReLU(),
                                 nn.Linear(width, out_width))

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        """One output row per edge."""
        return self.mlp(torch.cat([h_src, h_dst, h_src * h_dst], 1))


class EdgeTask:
    """What an edge task adds to the node task it reuses (a mixin placed first)."""

    def check_labels(self, dtype: torch.dtype, where: str) -> None:
        """Refuse edge labels of the wrong kind (integer class ids for ``edge_classification``,
        float targets for ``edge_regression``): one line naming ``where``."""
        wanted = self.facts.edge_target  # type: ignore[attr-defined]
        if dtype.is_floating_point != (wanted != "class"):
            held = "float targets" if dtype.is_floating_point else "integer class ids"
            raise DataError(f"{where}: the partitions hold {held} as edge labels, task "
                            f"{self.name!r} trains on {wanted!r} targets; partition "  # type: ignore[attr-defined]
                            f"with task.name: {self.name}")  # type: ignore[attr-defined]

    def outputs(self, out: Any, index: dict[str, np.ndarray], target: Any = None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """``edge_id`` first, then the other index columns (``src``, ``dst``) and the node
        task's columns, sorted by edge id."""
        (key, ids), *others = index.items()
        cols = super().outputs(out, {key: ids}, target)  # type: ignore[misc]
        order = np.argsort(ids, kind="stable")
        return {key: cols.pop(key), **{k: np.asarray(v)[order] for k, v in others}, **cols}

    @classmethod
    def check_outputs(cls, embeddings: bool, model_probe: Optional[torch.nn.Module]) -> None:
        """An edge has no embedding of its own to export."""
        if embeddings:
            raise ConfigError(f"--embeddings: task {cls.name!r} predicts per edge; "  # type: ignore[attr-defined]
                              f"export node embeddings from a node task's run")


class EdgeClassification(EdgeTask, NodeClassification):
    """One class per labelled edge; ``target``: class ids; ``out``: logits."""

    facts_of = "edge_classification"


class EdgeRegression(EdgeTask, NodeRegression):
    """One or more float targets per labelled edge."""

    facts_of = "edge_regression"
