"""Node batches: seeds are a homogeneous graph's labelled nodes, split over trainers.

Each trainer reads its partition's nodes from shared memory and, from a cache of at most
``sampled.feature_memory_mb`` (quantized to ``sampled.feature_cache_bits``), the remote rows
read most in mini-batches pre-sampled before training (:mod:`dsgraph.distgraph.features`); the
rest travels over RPC. With ``sampled.local_sampling`` every frontier node whose in-edges the
trainer's partition graph stores in full is sampled there, without RPC
(:mod:`dsgraph.distgraph.local_sampler`). Evaluation is exact layer-wise inference for models
with ``forward_layer`` (``sampled.eval: layerwise``), else sampled; so are the per-node outputs
``python -m predict`` exports.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import dgl
import torch
from torch import nn

from dsgraph import checkpoint, dist
from dsgraph.config import Config
from dsgraph.distgraph.evaluate import node_outputs, split_metrics
from dsgraph.distgraph.features import CachedFeatures, feature_cache
from dsgraph.distgraph.local_sampler import LOCAL_ID, LocalHaloSampler, LocalIndex, SampleCounter
from dsgraph.errors import ConfigError
from dsgraph.models.registry import probe_model
from dsgraph.phases import phase
from dsgraph.partition import partition_json
from dsgraph.modes.sampled.source import (PRESAMPLE_BATCHES, Batch, BatchSource, FanoutBlocks,
                                          check_fanouts, fanouts_message, homogeneous_inputs,
                                          layerwise, seeded_sampling)


class NodeBatches(BatchSource):
    """Mini-batches of a homogeneous graph's training nodes and their sampled neighbourhoods."""

    @staticmethod
    def prepare(cfg: Config) -> Path:
        """The partition files exist, the model arguments are accepted and the fanouts match
        the model's layers."""
        check_fanouts(cfg, probe_model(cfg.model.name, cfg.model.args))  # before any process
        return partition_json(cfg)

    def setup(self, trainer: Any) -> nn.Module:
        """Split the labelled nodes over trainers, bind the task, build model and cache."""
        g, s = self.g, self.cfg.sampled
        even = s.seed_split == "even"
        self.split = {name: dgl.distributed.node_split(g.ndata[f"{name}_mask"], self.pb,
                                                       force_even=even or name != "train")
                      for name in ("train", "val", "test")}
        self.task.check_labels(g.ndata["label"].dtype, str(self.part_config))
        self.label = CachedFeatures(g, "label")  # seeds are mostly owned: no cache
        self.task.bind(self._label_width(json.loads(self.part_config.read_text())),
                       lambda: self.task.target(self.label[self.split["train"]]))
        self.num_scores = self.task.num_sums
        model = trainer.build_model(g.ndata["feat"].shape[1],
                                    self.task.head_width(self.task.width))
        check_fanouts(self.cfg, model)  # its layer count may depend on the data's widths
        index = LocalIndex.build(g) if s.local_sampling else None
        self.sampler = dgl.dataloading.NeighborSampler(s.fanouts) if index is None \
            else LocalHaloSampler(s.fanouts, index)
        self.counter = SampleCounter(g, index)
        self.feat = feature_cache(g, s, self.cfg.cluster.trainers_per_machine,
                                  lambda: self._presample(trainer.rank), model=model)
        self.steps_per_epoch = (self.split["train"].numel() + s.batch_size - 1) // s.batch_size
        return model

    def prefetch_depth(self) -> int:
        """A rematerialized forward pulls rows over RPC itself: no second thread on DGL's
        client. Sampler processes already sample ahead."""
        s = self.cfg.sampled
        return 0 if s.rematerialize or self.cfg.cluster.samplers_per_trainer else s.prefetch

    def epoch(self, seed: int) -> Callable[[], Iterator[Batch]]:
        """This trainer's training nodes in a fresh order."""
        order = self.split["train"][torch.randperm(self.split["train"].numel())]

        def batches() -> Iterator[Batch]:
            for input_nodes, seeds, blocks in self.sample(order):
                lids = blocks[0].srcdata.pop(LOCAL_ID, None)  # sampled wholly in the partition
                with phase("sample"):
                    self.counter.add(blocks, all_local=lids is not None)
                with phase("gather"):
                    x, blocks = homogeneous_inputs(self.cfg, self.feat, self.pb, input_nodes,
                                                   lids, blocks)
                    target = self.task.target(self.label[seeds])
                yield Batch(seeds.numel(), x, blocks, target)
        return lambda: seeded_sampling(seed, batches())

    def forward(self, module: nn.Module, batch: Batch) -> torch.Tensor:
        """The model's rows of the batch's seeds."""
        out = module(FanoutBlocks(batch.blocks, self.cfg), batch.x)
        if out.shape[0] != batch.size:  # a plug-in model consumed fewer blocks
            raise ConfigError(fanouts_message(
                self.cfg, f"returned {out.shape[0]} rows for {batch.size} seed nodes"))
        return out

    def loss(self, batch: Batch, out: torch.Tensor) -> torch.Tensor:
        """The task's loss of the seeds' rows."""
        return self.task.loss(out, batch.target)

    def reset_figures(self) -> None:
        """Feature and sampling counters at zero."""
        self.feat.remote_rows = self.feat.cache_hits = 0
        self.counter.reset()

    def figures(self) -> list[float]:
        """Remote feature bytes, sampling requests and nodes, feature rows and cache hits."""
        f, c = self.feat, self.counter
        return [f.remote_rows * f.row_bytes, c.requests, c.remote_nodes, c.local_nodes,
                f.remote_rows, f.cache_hits]

    def figure_record(self, totals: list[float]) -> dict[str, Any]:
        """Traffic keys of an epoch's record."""
        remote_bytes, requests, remote, local, rows, hits = totals
        sampled, foreign = remote + local, rows + hits
        return {"remote_feature_bytes": int(remote_bytes), "rpc_sample_requests": int(requests),
                "remote_sampled_nodes": int(remote),
                "local_sample_fraction": local / sampled if sampled else None,
                # of the feature rows owned by another partition, the share the cache served
                "cache_hit_rate": hits / foreign if foreign else None}

    def cache_bytes(self) -> int:
        """The feature cache's bytes."""
        return self.feat.cache_bytes

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
            with phase("sample"):
                batch = self.sampler.sample_blocks(self.g, order[start:start + bs])
            yield batch

    def evaluate(self, trainer: Any) -> dict[str, Any]:
        """The task's validation and test metrics over all nodes (layer-wise when the model
        allows it)."""
        s = self.cfg.sampled
        return split_metrics(trainer.model, self.g, self.task,
                             {"val": self.split["val"], "test": self.split["test"]},
                             layerwise(self.cfg, trainer.model), s.fanouts, s.eval_batch_size)

    def predict(self, trainer: Any, embeddings: bool,
                pairs: Optional[Any] = None) -> Optional[dict[str, Any]]:
        """Every node's outputs, computed as evaluation computes them, read by rank 0."""
        s = self.cfg.sampled
        out = node_outputs(trainer.model, self.g, trainer.rank, layerwise(self.cfg, trainer.model),
                           s.fanouts, s.eval_batch_size, embeddings)
        return None if out is None else self.task.outputs(
            out["logits"], {"node_id": out["node_id"].numpy()}, embedding=out.get("embedding"))

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
