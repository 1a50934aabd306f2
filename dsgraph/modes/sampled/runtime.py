"""The sampled runtime: trainers beside DistGraph servers, one epoch loop for every batch source.

It opens the job's DistGraph once, picks the batch source by what the task trains on (nodes or
edges) and the graph kind (:func:`source_class`), and runs the loop every source shares: the
same seed per epoch and rank, a barrier before the clock, DDP (or gradients summed after
backward), the compression context around the forward, the step, running sums and their sum
over ranks. Evaluation, predictions and the cache belong to the source.
"""
from __future__ import annotations

import contextlib
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import dgl
import numpy as np
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dsgraph import checkpoint, dist, phases, remat
from dsgraph.cluster.dgl_job import TrainerContext, run_dgl_job
from dsgraph.compress import compression_context
from dsgraph.config import Config
from dsgraph.distgraph.prefetch import Prefetcher
from dsgraph.memplan import MemoryPlan, read_parts
from dsgraph.partition.meta import is_hetero, partitions_are_hetero
from dsgraph.tasks import task_class
from dsgraph.trainer import Strategy, Trainer
from dsgraph.modes.sampled.edges import EdgeBatches
from dsgraph.modes.sampled.links import LinkBatches
from dsgraph.modes.sampled.memory import plan_sampled
from dsgraph.modes.sampled.nodes import NodeBatches
from dsgraph.modes.sampled.source import BatchSource
from dsgraph.modes.sampled.typed import TypedNodeBatches


# What a task trains on (Task.trains_on) -> its batches on a homogeneous graph.
SOURCES: dict[str, type[BatchSource]] = {"nodes": NodeBatches, "edges": EdgeBatches,
                                         "links": LinkBatches}


def source_class(cfg: Config, hetero: bool) -> type[BatchSource]:
    """The batch source of ``cfg``'s task on a homogeneous or heterogeneous graph."""
    return TypedNodeBatches if hetero else SOURCES[task_class(cfg.task_name).trains_on]


class DistGraphStrategy(Strategy):
    """A mode whose trainers read partitions served by DistGraph servers: how its job starts,
    joins the servers and leaves them."""

    @staticmethod
    def launch(cfg: Config, job_dir: Path, prepared: Path, worker: str, args: Sequence[str],
               name: str = "worker") -> dict[str, float]:
        """DistGraph servers for the partitions in ``prepared`` (the partition JSON) and the
        trainers (``worker``) beside them."""
        return run_dgl_job(job_dir, prepared, cfg.cluster, worker, args, cfg.train.timeout_s)

    def connect(self, trainer: Trainer) -> None:
        """Join the DistGraph servers (before the gloo group, as DGL's launcher does)."""
        logging.getLogger("dgl-distributed-socket").setLevel(logging.ERROR)
        self.context = TrainerContext.from_env()
        dgl.distributed.initialize(self.context.ip_config)

    def close(self, trainer: Trainer) -> None:
        """Say goodbye to the servers (they exit once every trainer has)."""
        dgl.distributed.exit_client()


class SampledStrategy(DistGraphStrategy):
    """Sampled message passing on a partitioned graph served by DistGraph."""

    # (pairs, 2) original node ids to score instead of exporting embeddings (predict --pairs)
    pairs: Optional[np.ndarray] = None

    @staticmethod
    def prepare(cfg: Config) -> Path:
        """Launcher side: what the batch source checks before any process starts."""
        return source_class(cfg, partitions_are_hetero(cfg)).prepare(cfg)

    @staticmethod
    def plan_memory(cfg: Config) -> MemoryPlan:
        """Servers and trainers per machine, a mini-batch from the batch source's seeds."""
        meta, parts = read_parts(cfg)
        return plan_sampled(cfg, meta, parts,
                            source_class(cfg, is_hetero(meta)).seed_nodes(cfg))

    def setup(self, trainer: Trainer) -> nn.Module:
        """Open the DistGraph and let the batch source load this rank's share."""
        self.g = dgl.distributed.DistGraph(self.context.graph_name)
        part_config = self.context.part_config
        hetero = is_hetero(json.loads(part_config.read_text()))
        self.source = source_class(self.cfg, hetero)(self.cfg, self.task, self.g, part_config)
        model = self.source.setup(trainer)
        if self.cfg.sampled.rematerialize:  # layers then take the sources' RematBlocks
            remat.install(model)
        self.sync_grads = not self.source.ddp
        self.steps_per_epoch = self.source.steps_per_epoch
        self.ahead = Prefetcher(self.source.prefetch_depth())
        return model

    def forward_module(self, model: nn.Module) -> nn.Module:
        """DDP around the model where the source wants gradients summed during backward."""
        self.module = DistributedDataParallel(model) if self.source.ddp else model
        return self.module

    def num_nodes(self) -> int:
        """Nodes of the whole graph (the range of ``python -m predict --pairs`` ids)."""
        return self.g.num_nodes()

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """One pass over this trainer's share of the source's seeds in a fresh order."""
        # DGL's sampler generator cannot be checkpointed: reseed it per epoch.
        src = self.source
        produce = src.epoch(checkpoint.epoch_seed(self.cfg.train.seed, epoch, trainer.rank))
        loss_sum = seen = batches = 0.0
        scores = [0.0] * src.num_scores
        src.reset_figures()
        # Every trainer starts the clock together: rank 0's checkpoint write after the last
        # epoch is not this epoch's training time on the others (DDP would make them wait);
        # it also keeps a sparse step off the embedding tables until rank 0 has read them.
        dist.barrier()
        clock = phases.EpochPhases(trainer.rank == 0) if self.cfg.train.profile else None
        t0 = time.perf_counter()
        joined = self.module.join() if src.ddp else contextlib.nullcontext()
        with joined:  # trainers may have unequal batch counts
            for batch in self.ahead(produce):
                # The loss stays outside: its backward uses the saved log-softmax non-linearly,
                # so quantizing it would bias every gradient.
                with phases.phase("forward"):
                    with compression_context(self.cfg.compression):
                        out = src.forward(self.module, batch)
                    loss = src.loss(batch, out)
                trainer.step(loss)
                with phases.phase("optimizer"):
                    src.after_step()
                loss_sum += loss.item() * batch.size
                if scores:
                    scores = [a + b for a, b in zip(scores, src.metric_sums(batch, out.detach()))]
                seen += batch.size
                batches += 1
                trainer.advance(loss=loss.item(),
                                **{src.rate_key: seen / (time.perf_counter() - t0)})
        spent = None if clock is None else clock.values()
        train_s = dist.all_max([time.perf_counter() - t0])[0]
        figures = src.figures()
        total = dist.all_sum([loss_sum, seen, batches, *figures, *scores])
        k = 3 + len(figures)
        return {"loss": total[0] / max(total[1], 1.0),
                **(self.task.metrics(total[k:], "train") if scores else {}),
                "samples_per_s": total[1] / train_s, "batches": int(total[2]),
                **src.figure_record(total[3:k]),
                **(phases.epoch_record(dist.all_sum(spent), total[1]) if spent else {})}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """The source's validation and test figures."""
        return self.source.evaluate(trainer)

    def predict(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
        """The source's outputs (or scores of :attr:`pairs`), read by rank 0."""
        return self.source.predict(trainer, embeddings, self.pairs)

    def summary(self, trainer: Trainer, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Partitions and the median throughput (the first epoch, warm-up, left out)."""
        rates = [r["samples_per_s"] for r in records]
        return {"num_parts": int(self.source.pb.num_partitions()),
                "samples_per_s": statistics.median(rates[1:] or rates) if rates else 0.0,
                # the largest trainer's cache, ids included
                "feature_cache_mb": dist.all_max([self.source.cache_bytes() / 2**20])[0],
                **self.source.summary()}

    def close(self, trainer: Trainer) -> None:
        """Stop the prefetch thread; leave the servers."""
        if hasattr(self, "ahead"):
            self.ahead.close()
        super().close(trainer)

