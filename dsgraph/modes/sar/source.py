"""The full-graph source contract of the SAR runtime (:mod:`.runtime`): what a task trains on
when every epoch forwards the whole partitioned graph."""
from __future__ import annotations

import abc
import contextlib
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from dsgraph import dist
from dsgraph.config import Config
from dsgraph.models.gnn import capture_layer_input
from dsgraph.sar.worker import SarWorker
from dsgraph.tasks import Task
from dsgraph.trainer import Trainer


class FullGraphSource(abc.ABC):
    """What the SAR runtime trains on: it loads what its task needs from the worker's partition,
    builds the model, and turns a full-graph forward into the loss, the figures and the
    outputs. The runtime owns the worker, the forward and the step."""

    def __init__(self, cfg: Config, task: Task, w: SarWorker, x: torch.Tensor,
                 part_json: Path) -> None:
        self.cfg, self.task, self.w, self.x, self.part_json = cfg, task, w, x, part_json

    @abc.abstractmethod
    def setup(self, trainer: Trainer) -> nn.Module:
        """Load this worker's share of the task's data; the model (before SAR's patches)."""

    @abc.abstractmethod
    def loss(self, trainer: Trainer, h: torch.Tensor,
             epoch: int) -> tuple[torch.Tensor, float, list[float]]:
        """From this worker's rows ``h``: the tensor to differentiate (its gradient the loss's
        over the global count), this worker's share of the loss's value, and its additive
        training sums (summed over workers by the runtime). Collective where it fetches
        rows."""

    def record(self, sums: list[float]) -> dict[str, Any]:
        """The epoch record's training figures from the sums over workers."""
        return {}

    @abc.abstractmethod
    def evaluate(self, trainer: Trainer, h: torch.Tensor) -> dict[str, Any]:
        """Validation and test figures over all workers from the full-graph output ``h``."""

    @abc.abstractmethod
    def predict(self, trainer: Trainer, embeddings: bool,
                pairs: Optional[np.ndarray]) -> Optional[dict[str, Any]]:
        """The outputs ``python -m predict`` writes, on rank 0 (collective)."""

    def node_outputs(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
        """Every node's outputs: each worker forwards the whole graph and keeps its own nodes'
        rows, keyed by their original ids; rank 0 gathers them."""
        with capture_layer_input(trainer.model) if embeddings else \
                contextlib.nullcontext([]) as captured:
            logits = trainer.model(self.w.graph, self.x)
        mine = {"node_id": self.w.part.ndata["orig_id"].to(torch.int64), "logits": logits,
                "embedding": captured[-1] if embeddings else None}
        parts = dist.gather_values(mine)
        if trainer.rank != 0:
            return None
        return self.task.outputs(torch.cat([p["logits"] for p in parts]),
                                 {"node_id": torch.cat([p["node_id"] for p in parts]).numpy()},
                                 embedding=torch.cat([p["embedding"] for p in parts])
                                 if embeddings else None)
