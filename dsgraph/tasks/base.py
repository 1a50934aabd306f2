"""The task contract: the loss, the metrics, the output head's width and the exported outputs."""
from __future__ import annotations

import abc
from typing import Any, ClassVar, Optional, Sequence

import numpy as np
import torch


class Task(abc.ABC):
    """What a strategy asks of the task it trains; the strategy owns data and processes.

    ``target`` is what the task's data yields for the rows of ``out`` (class labels, say); each
    task documents its type. Metrics travel as additive sums (:meth:`metric_sums`) so that a
    strategy can add them over batches and ranks before :meth:`metrics` turns them into figures.
    """

    name: ClassVar[str]
    num_sums: ClassVar[int]  # length of :meth:`metric_sums`' list
    # Evaluation key that picks the run's best model (higher is better); None: keep the last.
    selection_metric: ClassVar[Optional[str]] = None

    @staticmethod
    def head_width(targets: int) -> int:
        """Width of the model's output layer when the data has ``targets`` classes/channels."""
        return targets

    @abc.abstractmethod
    def loss(self, out: torch.Tensor, target: Any, reduction: str = "mean") -> torch.Tensor:
        """The training loss of ``out`` against ``target``, averaged (``mean``) or summed
        (``sum``: the strategy normalises by a global count) over rows."""

    @abc.abstractmethod
    def metric_sums(self, out: Any, target: Any) -> list[float]:
        """Sums over the rows of ``out`` that add up over batches and ranks."""

    @abc.abstractmethod
    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Optional[float]]:
        """``<split>_<metric>`` figures from :meth:`metric_sums` added over all rows."""

    def split_metrics(self, sums: Sequence[float], splits: Sequence[str]) -> dict[str, Any]:
        """:meth:`metrics` of several splits whose :meth:`metric_sums` lie one after another
        in ``sums``, in the order of ``splits``."""
        k, out = self.num_sums, {}
        for i, split in enumerate(splits):
            out.update(self.metrics(sums[i * k:(i + 1) * k], split))
        return out

    @abc.abstractmethod
    def outputs(self, out: Any, index: dict[str, np.ndarray], target: Any = None,
                embedding: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
        """The columns ``python -m predict`` writes: ``index`` (the rows' ids), then the
        task's predictions of ``out`` (and ``target`` / ``embedding`` where the task keeps
        them), one row each, sorted by the first index column."""

    @classmethod
    def check_outputs(cls, embeddings: bool, model_probe: Optional[torch.nn.Module]) -> None:
        """Launcher side: refuse output options the task cannot honour (one-line UserError)."""
