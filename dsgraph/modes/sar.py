"""``train.mode: sar``: full-batch training, one worker per partition, with SAR aggregation.

Each worker loads its partition and trains the whole graph every epoch: the loss is normalised
by the global number of labelled nodes and gradients are summed over workers, so every worker
holds identical parameters. ``sar.mode`` picks sar / sa / one_shot aggregation. Predictions
(``python -m predict``) are the same full-graph forward, gathered on rank 0.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from dsgraph import dist
from dsgraph.compress import compression_context
from dsgraph.config import Config
from dsgraph.errors import DataError
from dsgraph.models.gnn import capture_layer_input
from dsgraph.models.registry import probe_model
from dsgraph.partition import partition_json
from dsgraph.sar.model import check_model, prepare_model
from dsgraph.sar.worker import SarWorker, setup_worker
from dsgraph.tasks.evaluation import split_figures
from dsgraph.trainer import Strategy, Trainer

SPLITS = ("train", "val", "test")


class SarStrategy(Strategy):
    """Full-batch sequential aggregation and rematerialization over the partitions."""

    @staticmethod
    def prepare(cfg: Config) -> Path:
        """Launcher side: partition files of the right part count, layers SAR can run."""
        path = partition_json(cfg)
        check_model(probe_model(cfg.model.name, cfg.model.args))
        return path

    def setup(self, trainer: Trainer) -> nn.Module:
        """Load this worker's partition, its shards and ring plan; build the model."""
        part_json = partition_json(self.cfg)
        nd = self._load_worker(part_json, trainer).part.ndata
        self.task.check_labels(nd["label"].dtype, str(part_json))
        self.label = self.task.target(nd["label"])
        self.masks = {k: self.w.local_mask(f"{k}_mask") for k in SPLITS}
        self.counts = dict(zip(SPLITS, dist.all_sum([float(m.sum()) for m in self.masks.values()])))
        if self.counts["train"] == 0:
            raise DataError(f"{part_json}: no node has train_mask set")
        self.task.bind(self._label_width(), lambda: self.label[self.masks["train"]])
        width = self.task.head_width(self.task.width)
        return prepare_model(trainer.build_model(self.x.shape[1], width))

    def _load_worker(self, part_json: Path, trainer: Trainer) -> SarWorker:
        """This worker's partition, shards and ring plan (``self.w``) and features
        (``self.x``)."""
        self.w = setup_worker(part_json, trainer.rank, trainer.world, self.cfg.sar.mode,
                              self.cfg.sar.prefetch, self.cfg.seqagg.chunk_rows)
        # Build every graph structure (with its sparse formats) now: it is part of loading, not
        # of the first epoch's forward pass.
        self.w.plan.materialize(self.cfg.sar.mode, self.cfg.seqagg.chunk_rows)
        self.x = self.w.part.ndata["feat"].to(trainer.dtype)
        return self.w

    def _label_width(self) -> int:
        """Targets per node (float labels), or classes: the largest class id on any worker + 1."""
        if self.label.dtype.is_floating_point:
            return int(self.label.shape[1]) if self.label.dim() > 1 else 1
        top = float(self.label.max()) if self.label.numel() else 0.0
        return int(dist.all_max([top])[0]) + 1

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """One full-graph step; the loss of every worker's labelled nodes, summed."""
        sent0 = self.w.comm.bytes_sent
        # the loss outside: see dsgraph/modes/sampled/runtime.py
        with compression_context(self.cfg.compression) as compressor, (
                self.w.rebuild_inputs([self.x], compressor) if self.cfg.sar.rebuild_inputs
                else contextlib.nullcontext()):
            logits = trainer.model(self.w.graph, self.x)
        tr = self.masks["train"]
        loss = self.task.loss(logits[tr], self.label[tr], "sum") / self.counts["train"]
        trainer.step(loss)
        scores = self.task.metric_sums(logits.detach()[tr], self.label[tr])
        del logits
        total = dist.all_sum([loss.item(), self.w.comm.bytes_sent - sent0, *scores])
        trainer.advance(loss=total[0])
        return {"loss": total[0], **self.task.metrics(total[2:], "train"),
                "bytes_sent": int(total[1])}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """The task's full-graph metrics on the validation and test nodes."""
        out = trainer.model(self.w.graph, self.x)
        return split_figures(self.task, {k: (out[self.masks[k]], self.label[self.masks[k]])
                                         for k in SPLITS[1:]})

    def predict(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
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

    def summary(self, trainer: Trainer, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The partition count and the aggregation mode."""
        return {"num_parts": trainer.world, "sar_mode": self.cfg.sar.mode}
