"""``train.mode: sampled``: mini-batches sampled from DistGraph servers' partitions, DDP.

Each trainer reads its partition's nodes from shared memory and, from a cache of at most
``sampled.feature_memory_mb`` (quantized to ``sampled.feature_cache_bits``), the remote rows
read most in mini-batches pre-sampled before training (:mod:`dsgraph.distgraph.features`); the
rest travels over RPC. With ``sampled.rematerialize``
the first block's sources are pulled and aggregated one owning partition at a time and rebuilt
in backward (:mod:`dsgraph.remat`, chunks of ``seqagg.chunk_rows`` rows). With
``sampled.local_sampling`` every frontier node whose in-edges the trainer's partition graph stores
in full is sampled there, without RPC (:mod:`dsgraph.distgraph.local_sampler`); with
``sampled.prefetch`` a thread samples and reads the next batches while one trains
(:mod:`dsgraph.distgraph.prefetch`). Evaluation is
exact layer-wise inference for models with ``forward_layer`` (``sampled.eval: layerwise``), else
sampled; so are the per-node outputs ``python -m predict`` exports
(:meth:`SampledStrategy.predict`).
"""
from __future__ import annotations

import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import dgl
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dsgraph import checkpoint, dist
from dsgraph.compress import compression_context
from dsgraph.config import Config
from dsgraph.config.limits import short_repr
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.distgraph.evaluate import node_outputs, split_metrics
from dsgraph.distgraph.features import CachedFeatures, feature_cache
from dsgraph.distgraph.local_sampler import LOCAL_ID, LocalHaloSampler, LocalIndex, SampleCounter
from dsgraph.distgraph.prefetch import Prefetcher
from dsgraph.errors import ConfigError
from dsgraph.models.gnn import layer_count
from dsgraph.models.registry import probe_model
from dsgraph.partition import partition_json
from dsgraph import remat
from dsgraph.trainer import Strategy, Trainer


# Mini-batches sampled before training to rank remote rows by how often they are read.
PRESAMPLE_BATCHES = 32


def check_fanouts(cfg: Config, model: nn.Module) -> None:
    """One fanout per message-passing layer (when the model says how many it has)."""
    fanouts, layers = cfg.sampled.fanouts, layer_count(model)
    if layers is not None and len(fanouts) != layers:
        raise ConfigError(f"{cfg.source}: sampled.fanouts: {short_repr(fanouts)} samples "
                          f"{len(fanouts)} layer(s) but model {cfg.model.name!r} has {layers} "
                          f"(model.args.num_layers); give one fanout per layer")


class FanoutBlocks(list):
    """A mini-batch's blocks, one per fanout; a model reading a block past the last one is
    told that ``sampled.fanouts`` is too short (instead of an IndexError deep in its forward)."""

    def __init__(self, blocks: list, cfg: Config) -> None:
        super().__init__(blocks)
        self.cfg = cfg

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            raise ConfigError(_fanouts_message(self.cfg, f"reads block {index}")) from None


def _fanouts_message(cfg: Config, what: str) -> str:
    fanouts = cfg.sampled.fanouts
    return (f"{cfg.source}: sampled.fanouts: {short_repr(fanouts)} gives {len(fanouts)} "
            f"block(s) per mini-batch but model {cfg.model.name!r} {what}; give one fanout per "
            f"model layer")


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
        dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])

    def close(self, trainer: Trainer) -> None:
        """Say goodbye to the servers (they exit once every trainer has)."""
        dgl.distributed.exit_client()


class SampledStrategy(DistGraphStrategy):
    """Sampled message passing on a partitioned graph served by DistGraph."""

    sync_grads = False  # DDP sums gradients during backward

    @staticmethod
    def prepare(cfg: Config) -> Path:
        """Launcher side: the partition files exist, the model arguments are accepted and the
        fanouts match the model's layers."""
        check_fanouts(cfg, probe_model(cfg.model.name, cfg.model.args))  # before any process
        return partition_json(cfg)

    def setup(self, trainer: Trainer) -> nn.Module:
        """Open the DistGraph, split the labelled nodes over trainers, build model and cache."""
        self.g = g = dgl.distributed.DistGraph(os.environ["DSGRAPH_DGL_GRAPH"])
        self.pb = g.get_partition_book()
        even = self.cfg.sampled.seed_split == "even"
        self.split = {name: dgl.distributed.node_split(g.ndata[f"{name}_mask"], self.pb,
                                                       force_even=even or name != "train")
                      for name in ("train", "val", "test")}
        conf = Path(os.environ["DGL_CONF_PATH"])
        self.task.check_labels(g.ndata["label"].dtype, str(conf))
        self.label = CachedFeatures(g, "label")  # seeds are mostly owned: no cache
        self.task.bind(self._label_width(json.loads(conf.read_text())),
                       lambda: self.task.target(self.label[self.split["train"]]))
        model = trainer.build_model(g.ndata["feat"].shape[1],
                                    self.task.head_width(self.task.width))
        check_fanouts(self.cfg, model)  # its layer count may depend on the data's widths
        s = self.cfg.sampled
        if self.cfg.sampled.rematerialize:
            remat.install(model)
        index = LocalIndex.build(g) if self.cfg.sampled.local_sampling else None
        self.sampler = dgl.dataloading.NeighborSampler(self.cfg.sampled.fanouts) if index is None \
            else LocalHaloSampler(self.cfg.sampled.fanouts, index)
        self.counter = SampleCounter(g, index)
        self.feat = feature_cache(g, s, self.cfg.cluster.trainers_per_machine,
                                  lambda: self._presample(trainer.rank))
        # A rematerialized forward pulls rows over RPC itself: no second thread on DGL's
        # client. Sampler processes already sample ahead.
        self.ahead = Prefetcher(0 if s.rematerialize or self.cfg.cluster.samplers_per_trainer
                                else s.prefetch)
        bs = self.cfg.sampled.batch_size
        self.steps_per_epoch = (self.split["train"].numel() + bs - 1) // bs
        return model

    def forward_module(self, model: nn.Module) -> nn.Module:
        """DDP around the model: gradients are summed while backward runs."""
        self.ddp = DistributedDataParallel(model)
        return self.ddp

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """One pass over this trainer's training nodes in a fresh order."""
        # DGL's sampler generator cannot be checkpointed: reseed it per epoch.
        seed = checkpoint.epoch_seed(self.cfg.train.seed, epoch, trainer.rank)
        order = self.split["train"][torch.randperm(self.split["train"].numel())]

        def batches_of_epoch():
            dgl.seed(seed)  # DGL's generator is per thread: seed the one that samples
            for input_nodes, seeds, blocks in self.sample(order):
                lids = blocks[0].srcdata.pop(LOCAL_ID, None)  # sampled wholly in the partition
                self.counter.add(blocks, all_local=lids is not None)
                x, blocks = self.inputs(input_nodes, lids, blocks)
                yield seeds, x, blocks, self.task.target(self.label[seeds])

        loss_sum = seeds_seen = batches = 0.0
        scores = [0.0] * self.task.num_sums
        self.feat.remote_rows = self.feat.cache_hits = 0
        self.counter.reset()
        # Every trainer starts the clock together: rank 0's checkpoint write after the last
        # epoch is not this epoch's training time on the others (DDP would make them wait).
        dist.barrier()
        t0 = time.perf_counter()
        with self.ddp.join():  # trainers may have unequal batch counts
            for seeds, x, blocks, y in self.ahead(batches_of_epoch):
                # The loss stays outside: its backward uses the saved log-softmax non-linearly,
                # so quantizing it would bias every gradient.
                with compression_context(self.cfg.compression):
                    out = self.ddp(FanoutBlocks(blocks, self.cfg), x)
                if out.shape[0] != seeds.numel():  # a plug-in model consumed fewer blocks
                    raise ConfigError(_fanouts_message(
                        self.cfg, f"returned {out.shape[0]} rows for {seeds.numel()} seed nodes"))
                loss = self.task.loss(out, y)
                trainer.step(loss)
                loss_sum += loss.item() * seeds.numel()
                scores = [a + b for a, b in zip(scores, self.task.metric_sums(out.detach(), y))]
                seeds_seen += seeds.numel()
                batches += 1
                trainer.advance(loss=loss.item(), seeds_s=seeds_seen / (time.perf_counter() - t0))
        train_s = dist.all_max([time.perf_counter() - t0])[0]
        total = dist.all_sum([loss_sum, seeds_seen, batches,
                              self.feat.remote_rows * self.feat.row_bytes,
                              self.counter.requests, self.counter.remote_nodes,
                              self.counter.local_nodes, self.feat.remote_rows,
                              self.feat.cache_hits, *scores])
        sampled, foreign = total[5] + total[6], total[7] + total[8]
        return {"loss": total[0] / max(total[1], 1.0), **self.task.metrics(total[9:], "train"),
                "samples_per_s": total[1] / train_s, "batches": int(total[2]),
                "remote_feature_bytes": int(total[3]), "rpc_sample_requests": int(total[4]),
                "remote_sampled_nodes": int(total[5]),
                "local_sample_fraction": total[6] / sampled if sampled else None,
                # of the feature rows owned by another partition, the share the cache served
                "cache_hit_rate": total[8] / foreign if foreign else None}

    def _presample(self, rank: int) -> Iterator[torch.Tensor]:
        """Input nodes of :data:`PRESAMPLE_BATCHES` mini-batches of this trainer's training
        seeds, sampled as training samples them (the cache's ``frequency`` policy)."""
        seeds = self.split["train"]
        seed = checkpoint.epoch_seed(self.cfg.train.seed, 0, rank)
        order = seeds[torch.randperm(seeds.numel(),
                                     generator=torch.Generator().manual_seed(seed))]
        order = order[:PRESAMPLE_BATCHES * self.cfg.sampled.batch_size]
        dgl.seed(seed)
        for input_nodes, _, _ in self.sample(order):
            yield input_nodes

    def sample(self, order: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor, list]]:
        """(input nodes, seeds, blocks) of consecutive ``batch_size`` slices of ``order``.

        Sampler processes need DGL's DistNodeDataLoader; in the trainer the sampler is called
        directly, as that loader's collator calls it: its batching turns every seed id into a
        Python int and back (about 8% of an epoch in a profile).
        """
        bs = self.cfg.sampled.batch_size
        if self.cfg.cluster.samplers_per_trainer:
            yield from dgl.dataloading.DistNodeDataLoader(self.g, order, self.sampler,
                                                          batch_size=bs)
            return
        for start in range(0, order.numel(), bs):
            yield self.sampler.sample_blocks(self.g, order[start:start + bs])

    def inputs(self, input_nodes: torch.Tensor, lids: Optional[torch.Tensor],
               blocks: list) -> tuple[torch.Tensor, list]:
        """The batch's input features (``lids``: the input nodes' local ids, when known) and
        blocks; rematerialized, the first ``sampled.remat_layers`` blocks become RematBlocks
        and the features a placeholder (rows are pulled group by group)."""
        if not self.cfg.sampled.rematerialize:
            return self.feat.by_local_id(input_nodes, lids), blocks
        chunk, comp, k = self.cfg.seqagg.chunk_rows, self.cfg.compression, \
            self.cfg.sampled.remat_layers
        rb = remat.RematBlock(blocks[0], remat.FeatureRows(self.feat), self.pb.nid2partid,
                              self.pb.partid, chunk, comp)
        later = [remat.RematBlock(b, None, chunk_rows=chunk, compression=comp)
                 for b in blocks[1:k]]
        return rb.placeholder(self.feat.tensor.shape[1], self.feat.tensor.dtype), \
            [rb] + later + list(blocks[k:])

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """The task's validation and test metrics over all nodes (layer-wise when the model
        allows it)."""
        s = self.cfg.sampled
        return split_metrics(trainer.model, self.g, self.task,
                             {"val": self.split["val"], "test": self.split["test"]},
                             self._layerwise(trainer), s.fanouts, s.eval_batch_size)

    def predict(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
        """Every node's outputs, computed as evaluation computes them, read by rank 0."""
        s = self.cfg.sampled
        out = node_outputs(trainer.model, self.g, trainer.rank, self._layerwise(trainer),
                           s.fanouts, s.eval_batch_size, embeddings)
        return None if out is None else self.task.outputs(
            out["logits"], {"node_id": out["node_id"].numpy()}, embedding=out.get("embedding"))

    def _layerwise(self, trainer: Trainer) -> bool:
        """Whether evaluation and predictions are exact layer-wise inference."""
        return self.cfg.sampled.eval == "layerwise" and hasattr(trainer.model, "forward_layer")

    def summary(self, trainer: Trainer, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Partitions and the median throughput (the first epoch, warm-up, left out)."""
        rates = [r["samples_per_s"] for r in records]
        cache_mb = dist.all_max([self.feat.cache_bytes / 2**20])[0]
        return {"num_parts": int(self.pb.num_partitions()),
                "samples_per_s": statistics.median(rates[1:] or rates) if rates else 0.0,
                "feature_cache_mb": cache_mb}  # the largest trainer's cache, ids included

    def close(self, trainer: Trainer) -> None:
        """Stop the prefetch thread; leave the servers."""
        if hasattr(self, "ahead"):
            self.ahead.close()
        super().close(trainer)

    def _label_width(self, meta: dict) -> int:
        """Classes or targets per node, as the partition JSON records them (``num_classes`` /
        ``num_targets``), else from the labels."""
        label = self.g.ndata["label"]
        if label.dtype.is_floating_point:
            return int(meta.get("num_targets", 0)) or (int(label.shape[1])
                                                       if len(label.shape) > 1 else 1)
        if meta.get("num_classes"):
            return int(meta["num_classes"])
        some = label[torch.arange(0, min(self.g.num_nodes(), 200_000))]
        return int(dist.all_max([float(some.max())])[0]) + 1
