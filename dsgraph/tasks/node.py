"""What every node task shares: labels read from the partitions, loss weights, outputs sorted
by node id."""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from dsgraph.errors import ConfigError, DataError
from dsgraph.models.gnn import output_layer
from dsgraph.tasks.base import Task


class NodeTask(Task):
    """A task on the labelled nodes of a graph; ``out``: one row of the output layer per node."""

    def check_labels(self, dtype: torch.dtype, where: str) -> None:
        """Refuse partitions whose labels are of the wrong kind (integer class ids for a
        ``class`` task, float targets otherwise): one line naming ``where``."""
        floating, wanted = dtype.is_floating_point, self.facts.target
        if floating != (wanted != "class"):
            held = "float targets" if floating else "integer class ids"
            raise DataError(f"{where}: the partitions hold {held} as labels, task {self.name!r} "
                            f"trains on {wanted!r} targets; partition with "
                            f"dataset.target: {wanted}")

    def target(self, label: torch.Tensor) -> torch.Tensor:
        """The stored labels in the form :meth:`loss` takes (default: as stored)."""
        return label

    @staticmethod
    def sorted_index(index: dict[str, np.ndarray]) -> tuple[str, np.ndarray, torch.Tensor]:
        """The index column's name, its ids sorted, and the row order that sorts them."""
        (key, ids), = index.items()
        order = np.argsort(ids, kind="stable")
        return key, np.asarray(ids)[order].astype(np.int64), torch.from_numpy(order)

    @classmethod
    def check_outputs(cls, embeddings: bool, model_probe: Optional[torch.nn.Module]) -> None:
        """``--embeddings`` needs a model whose output layer can be found."""
        if embeddings and model_probe is not None:
            output_layer(model_probe)


def loss_weights(setting: Any, width: int, what: str,
                 balanced: Callable[[], np.ndarray]) -> Optional[torch.Tensor]:
    """``task.class_weights`` resolved for data of ``width`` classes or labels (``what``):
    None for ``none``, ``balanced()`` (collective where it sums over ranks), or the list, which
    must hold one weight per class or label."""
    if setting == "none":
        return None
    if setting == "balanced":
        return torch.from_numpy(np.asarray(balanced(), dtype=np.float64))
    if len(setting) != width:
        raise ConfigError(f"task.class_weights: expected {width} weights (one per {what} of the "
                          f"data), got {len(setting)}")
    return torch.tensor([float(w) for w in setting], dtype=torch.float64)


def as_float64(t: Any) -> np.ndarray:
    """A tensor or array as float64 numpy (sums over float32 rows lose nothing then)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=np.float64)
