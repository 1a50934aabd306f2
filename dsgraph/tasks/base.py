"""The task contract: the loss, the metrics, the output head's width and the exported outputs."""
from __future__ import annotations

import abc
from typing import Any, Callable, ClassVar, Optional, Sequence

import numpy as np
import torch

from dsgraph.config import TaskConfig
from dsgraph.config.tasks import TaskFacts, task_facts


class Task(abc.ABC):
    """What a strategy asks of the task it trains; the strategy owns data and processes.

    ``target`` is what the task's data yields for the rows of ``out`` (class labels, say); each
    task documents its type. Metrics travel as additive sums (:meth:`metric_sums`) so that a
    strategy can add them over batches and ranks before :meth:`metrics` turns them into figures;
    a figure no sum gives exactly (ROC-AUC) comes from :meth:`row_metrics` over every rank's
    evaluated rows (:data:`gathers_rows`; :func:`dsgraph.tasks.evaluation.split_figures`).
    """

    # The task's facts (dsgraph.config.tasks), set from the ``facts_of`` name a concrete class
    # declares; ``name`` and ``trains_on`` (what a training step's seeds are, by which a mode
    # picks its batches) are read from them.
    facts_of: ClassVar[str]
    facts: ClassVar[TaskFacts]
    name: ClassVar[str]
    trains_on: ClassVar[str]
    num_sums: int  # length of :meth:`metric_sums`' list (a constant, or set by :meth:`bind`)
    # Evaluation key that picks the run's best model; None: keep the last.
    selection_metric: ClassVar[Optional[str]] = None
    # Whether a lower selection metric is better (an error) rather than a higher (a score).
    lower_is_better: ClassVar[bool] = False
    # Whether evaluation gathers every rank's rows for :meth:`row_metrics`.
    gathers_rows: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "facts_of" in cls.__dict__:
            cls.facts = task_facts(cls.facts_of)
            cls.name, cls.trains_on = cls.facts.name, cls.facts.trains_on

    def __init__(self, cfg: Optional[TaskConfig] = None) -> None:
        self.cfg = cfg if cfg is not None else TaskConfig()
        self.width: Optional[int] = None  # classes / targets of the data (set by :meth:`bind`)

    @staticmethod
    def head_width(targets: int) -> int:
        """Width of the model's output layer when the data has ``targets`` classes/channels."""
        return targets

    def bind(self, width: int, train_targets: Optional[Callable[[], Any]] = None) -> None:
        """Size the task for data of ``width`` classes or targets and fit what it derives from
        the training targets (``train_targets()``: this rank's share; collective where a task
        sums them over ranks: every rank calls it)."""
        self.width = width

    def better(self, new: float, old: float) -> bool:
        """Whether selection-metric value ``new`` beats ``old`` (strictly)."""
        return new < old if self.lower_is_better else new > old

    @abc.abstractmethod
    def loss(self, out: torch.Tensor, target: Any, reduction: str = "mean") -> torch.Tensor:
        """The training loss of ``out`` against ``target``, averaged (``mean``) or summed
        (``sum``: the strategy normalises by a global count) over rows."""

    @abc.abstractmethod
    def metric_sums(self, out: Any, target: Any) -> list[float]:
        """Sums over the rows of ``out`` that add up over batches and ranks."""

    @abc.abstractmethod
    def metrics(self, sums: Sequence[float], split: str) -> dict[str, Any]:
        """``<split>_<metric>`` figures from :meth:`metric_sums` added over all rows."""

    def row_metrics(self, out: np.ndarray, target: np.ndarray, split: str) -> dict[str, Any]:
        """``<split>_<metric>`` figures that need every row of the split at once (``out`` and
        ``target`` of all ranks, concatenated); only called when :data:`gathers_rows`."""
        return {}

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
