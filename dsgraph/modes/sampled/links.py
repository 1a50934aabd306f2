"""Link batches for link prediction: seeds are the partitioned graph's edges, each with its
negatives.

The training edges are the partitioned graph's edges (validation and test edges were removed
before partitioning, :mod:`dsgraph.data.link_split`), split over trainers by DGL's
``edge_split``; each batch adds its negatives (``task.negative_sampler``: per edge, shared by
the batch, or the batch's other destinations) and samples its endpoints' neighbourhoods
without the batch's own edges (either direction, :mod:`dsgraph.distgraph.link_sampler`; over
RPC or, with ``sampled.local_sampling``, in the trainer's partition where it stores them).
``task.loss`` scores each positive against its negatives (BCE or InfoNCE). The node model's
output is the embedding; the decoder (``task.decoder``) is a submodule of the model
(``link_decoder``), so DDP, Adam and checkpoints carry it. Evaluation ranks the held-out edges
of ``link_split.npz`` from exact layer-wise embeddings (:mod:`dsgraph.distgraph.link_evaluate`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import dgl
import numpy as np
import torch
from torch import nn

from dsgraph import checkpoint
from dsgraph.distgraph.evaluate import node_outputs, read_all
from dsgraph.distgraph.features import feature_cache
from dsgraph.distgraph.link_evaluate import EvalEdges, held_out_edges, link_metrics
from dsgraph.config import Config
from dsgraph.distgraph.link_sampler import PairExcludingSampler, edge_batch, negative_count
from dsgraph.distgraph.local_sampler import LocalIndex, SampleCounter, local_frontier
from dsgraph.errors import DataError
from dsgraph.tasks.link_prediction import embedding_width, make_decoder
from dsgraph.modes.sampled.nodes import NodeBatches
from dsgraph.modes.sampled.source import (PRESAMPLE_BATCHES, Batch, BatchSource, FanoutBlocks,
                                          check_fanouts, homogeneous_inputs, layerwise,
                                          seeded_sampling)


class LinkBatches(BatchSource):
    """Mini-batches of training edges with their negatives and sampled neighbourhoods."""

    rate_key = "edges_s"
    prepare = staticmethod(NodeBatches.prepare)

    @staticmethod
    def seed_nodes(cfg: Config) -> int:
        """Both endpoints of every training edge and the batch's negative destinations."""
        b, t = cfg.sampled.batch_size, cfg.task
        return 2 * b + negative_count(t.negative_sampler, t.negatives, b)

    def setup(self, trainer: Any) -> nn.Module:
        """Split the training edges over trainers, read the held-out edges, build model,
        decoder and feature cache."""
        g, s = self.g, self.cfg.sampled
        meta = json.loads(self.part_config.read_text())
        if "link_split" not in meta:
            raise DataError(f"{self.part_config}: no link_split (held-out edges): the "
                            f"partitions were not made for link prediction; partition with "
                            f"task.name: link_prediction")
        train_eids = dgl.distributed.edge_split(
            torch.ones(g.num_edges(), dtype=torch.bool), self.pb, force_even=True)
        # the endpoints once, not one find_edges request per batch
        self.train_src, self.train_dst = g.find_edges(train_eids)
        width = embedding_width(self.cfg.model.args)
        self.task.bind(width)
        model = trainer.build_model(g.ndata["feat"].shape[1], self.task.head_width(width))
        check_fanouts(self.cfg, model)
        model.link_decoder = make_decoder(self.cfg.task.decoder, width).to(trainer.dtype)
        self.decoder = model.link_decoder
        index = LocalIndex.build(g) if s.local_sampling else None
        self.sampler = PairExcludingSampler(s.fanouts, None if index is None else (
            lambda g, seeds, fanout: local_frontier(g, index, seeds, fanout)))
        self.counter = SampleCounter(g, index)
        self.feat = feature_cache(g, s, self.cfg.cluster.trainers_per_machine,
                                  lambda: self._presample(trainer.rank), model=model)
        self.eval_edges = self._eval_edges(self.part_config.parent / meta["link_split"], trainer)
        self.steps_per_epoch = (self.train_src.numel() + s.batch_size - 1) // s.batch_size
        return model

    def prefetch_depth(self) -> int:
        """No thread beside a rematerialized forward (see :class:`NodeBatches`)."""
        s = self.cfg.sampled
        return 0 if s.rematerialize else s.prefetch

    def _eval_edges(self, path: Path, trainer: Any) -> dict[str, EvalEdges]:
        """This rank's share of the validation and test edges with their negatives, and each
        split's Hits@K negatives, in the partitioned graph's ids."""
        n = self.g.num_nodes()
        new_of = np.empty(n, dtype=np.int64)  # original id -> partitioned id
        new_of[read_all(self.g.ndata["orig_id"]).numpy()] = np.arange(n, dtype=np.int64)
        return {name: edges.mapped(new_of) for name, edges in held_out_edges(
            path, n, self.cfg.task, self.cfg.dataset.seed, trainer.rank, trainer.world).items()}

    def _presample(self, rank: int) -> Iterator[torch.Tensor]:
        """Input nodes of :data:`PRESAMPLE_BATCHES` mini-batches of this trainer's training
        edges with their negatives, sampled as training samples them (the cache's
        ``frequency`` policy)."""
        seed = checkpoint.epoch_seed(self.cfg.train.seed, 0, rank)
        order = torch.randperm(self.train_src.numel(),
                               generator=torch.Generator().manual_seed(seed))
        bs, t = self.cfg.sampled.batch_size, self.cfg.task
        negatives = torch.Generator().manual_seed(seed)
        dgl.seed(seed)
        for start in range(0, min(order.numel(), PRESAMPLE_BATCHES * bs), bs):
            rows = order[start:start + bs]
            yield edge_batch(self.g, self.sampler, self.train_src[rows], self.train_dst[rows],
                             t.negatives, negatives, t.negative_sampler).input_nodes

    def epoch(self, seed: int) -> Callable[[], Iterator[Batch]]:
        """This trainer's training edges in a fresh order."""
        order = torch.randperm(self.train_src.numel(),
                               generator=torch.Generator().manual_seed(seed))
        bs, t = self.cfg.sampled.batch_size, self.cfg.task

        def batches() -> Iterator[Batch]:
            negatives = torch.Generator().manual_seed(seed)
            for start in range(0, order.numel(), bs):
                rows = order[start:start + bs]
                edges = edge_batch(self.g, self.sampler, self.train_src[rows],
                                   self.train_dst[rows], t.negatives, negatives,
                                   t.negative_sampler)
                self.counter.add(edges.blocks, all_local=False)
                x, blocks = homogeneous_inputs(self.cfg, self.feat, self.pb, edges.input_nodes,
                                               None, edges.blocks)
                yield Batch(len(edges.pos), x, blocks, pairs=edges)
        return lambda: seeded_sampling(seed, batches())

    def forward(self, module: nn.Module, batch: Batch) -> torch.Tensor:
        """The embeddings of the batch's endpoints and negatives."""
        return module(FanoutBlocks(batch.blocks, self.cfg), batch.x)

    def loss(self, batch: Batch, out: torch.Tensor) -> torch.Tensor:
        """Each positive edge scored against its negatives."""
        return self.task.edge_loss(*batch.pairs.scores(out, self.decoder))

    def reset_figures(self) -> None:
        """Feature and sampling counters at zero."""
        self.feat.remote_rows = self.feat.cache_hits = 0
        self.counter.reset()

    def figures(self) -> list[float]:
        """Remote feature bytes, sampling requests and remotely sampled nodes."""
        return [self.feat.remote_rows * self.feat.row_bytes, self.counter.requests,
                self.counter.remote_nodes]

    def figure_record(self, totals: list[float]) -> dict[str, Any]:
        """Traffic keys of an epoch's record."""
        return {"remote_feature_bytes": int(totals[0]), "rpc_sample_requests": int(totals[1]),
                "remote_sampled_nodes": int(totals[2])}

    def cache_bytes(self) -> int:
        """The feature cache's bytes."""
        return self.feat.cache_bytes

    def evaluate(self, trainer: Any) -> dict[str, Any]:
        """Validation and test MRR and Hits@K over all ranks' held-out edges."""
        s = self.cfg.sampled
        return link_metrics(trainer.model, self.decoder, self.g, self.task, self.eval_edges,
                            layerwise(self.cfg, trainer.model), s.fanouts, s.eval_batch_size)

    def predict(self, trainer: Any, embeddings: bool,
                pairs: Optional[np.ndarray] = None) -> Optional[dict[str, Any]]:
        """Every node's embedding (the model's output), or the task's scores of ``pairs``
        ((P, 2) original node ids); read by rank 0."""
        s = self.cfg.sampled
        out = node_outputs(trainer.model, self.g, trainer.rank, layerwise(self.cfg, trainer.model),
                           s.fanouts, s.eval_batch_size)
        if out is None:
            return None
        if pairs is None:
            return self.task.outputs(out["logits"], {"node_id": out["node_id"].numpy()})
        row_of = np.empty(len(out["node_id"]), dtype=np.int64)  # original id -> row
        row_of[out["node_id"].numpy()] = np.arange(len(out["node_id"]), dtype=np.int64)
        u, v = (torch.from_numpy(row_of[pairs[:, i]]) for i in (0, 1))
        return self.task.pair_outputs(pairs, self.decoder(out["logits"][u], out["logits"][v]))
