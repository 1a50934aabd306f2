"""The SAR runtime: full-batch training, one worker per partition, with SAR aggregation, for
every full-graph source.

Each worker loads its partition, shards and ring plan once; every epoch the model forwards the
whole partitioned graph (``sar.mode`` picks sar / sa / one_shot aggregation; the compression
context and ``sar.rebuild_inputs`` around it) and the source turns the worker's rows into its
task's loss, normalised by a global count so that gradients summed over workers are the
single-process gradients and every worker holds identical parameters. The source is picked by
what the task trains on (:data:`SOURCES`): labelled nodes (:class:`.nodes.NodeTargets`) or node
pairs (:class:`.links.LinkPairs`). Evaluation and predictions are full-graph forwards too,
gathered on rank 0.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Optional

import numpy as np
from torch import nn

from dsgraph import dist
from dsgraph.compress import compression_context
from dsgraph.config import Config
from dsgraph.memplan import MemoryPlan, read_parts
from dsgraph.models.registry import probe_model
from dsgraph.partition import partition_json
from dsgraph.sar.model import check_model, prepare_model
from dsgraph.sar.worker import setup_worker
from dsgraph.trainer import Strategy, Trainer
from dsgraph.modes.sar.links import LinkPairs
from dsgraph.modes.sar.memory import plan_sar
from dsgraph.modes.sar.nodes import NodeTargets
from dsgraph.modes.sar.source import FullGraphSource

# What a task trains on (its facts' trains_on) -> its full-graph source.
SOURCES: dict[str, type[FullGraphSource]] = {"nodes": NodeTargets, "links": LinkPairs}


class SarStrategy(Strategy):
    """Full-batch sequential aggregation and rematerialization over the partitions."""

    # (pairs, 2) original node ids to score instead of exporting embeddings (predict --pairs)
    pairs: Optional[np.ndarray] = None

    @staticmethod
    def prepare(cfg: Config) -> Path:
        """Launcher side: partition files of the right part count, layers SAR can run."""
        path = partition_json(cfg)
        check_model(probe_model(cfg.model.name, cfg.model.args))
        return path

    @staticmethod
    def plan_memory(cfg: Config) -> MemoryPlan:
        """One worker per partition: its partition, one ring round's rows, its activations."""
        return plan_sar(cfg, *read_parts(cfg))

    def setup(self, trainer: Trainer) -> nn.Module:
        """Load this worker's partition, its shards and ring plan, and the source's data; build
        the model."""
        part_json = partition_json(self.cfg)
        sar = self.cfg.sar
        self.w = setup_worker(part_json, trainer.rank, trainer.world, sar.mode, sar.prefetch,
                              self.cfg.seqagg.chunk_rows)
        # Build every graph structure (with its sparse formats) now: it is part of loading, not
        # of the first epoch's forward pass.
        self.w.plan.materialize(sar.mode, self.cfg.seqagg.chunk_rows)
        self.x = self.w.part.ndata["feat"].to(trainer.dtype)
        source = SOURCES[self.cfg.task_facts.trains_on]
        self.source = source(self.cfg, self.task, self.w, self.x, part_json)
        return prepare_model(self.source.setup(trainer))

    def num_nodes(self) -> int:
        """Nodes of the whole graph (the range of ``python -m predict --pairs`` ids)."""
        return self.w.part.num_global

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """One full-graph step; the loss of every worker's share, summed."""
        sent0 = self.w.comm.bytes_sent
        # The loss stays outside the compression context: see dsgraph/modes/sampled/runtime.py
        with compression_context(self.cfg.compression) as compressor, (
                self.w.rebuild_inputs([self.x], compressor) if self.cfg.sar.rebuild_inputs
                else contextlib.nullcontext()):
            h = trainer.model(self.w.graph, self.x)
        stand_in, loss, sums = self.source.loss(trainer, h, epoch)
        del h
        trainer.step(stand_in)
        total = dist.all_sum([loss, self.w.comm.bytes_sent - sent0, *sums])
        trainer.advance(loss=total[0])
        return {"loss": total[0], **self.source.record(total[2:]), "bytes_sent": int(total[1])}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """The source's validation and test figures from a full-graph forward."""
        return self.source.evaluate(trainer, trainer.model(self.w.graph, self.x))

    def predict(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
        """The source's outputs (or scores of :attr:`pairs`), read by rank 0."""
        return self.source.predict(trainer, embeddings, self.pairs)

    def summary(self, trainer: Trainer, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The partition count and the aggregation mode."""
        return {"num_parts": trainer.world, "sar_mode": self.cfg.sar.mode}
