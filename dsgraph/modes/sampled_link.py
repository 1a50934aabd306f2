"""``train.mode: sampled`` with ``task.name: link_prediction``: mini-batches of training edges.

The training edges are the partitioned graph's edges (validation and test edges were removed
before partitioning, :mod:`dsgraph.data.link_split`), split over trainers by DGL's
``edge_split``; each batch adds its negatives (``task.negative_sampler``: per edge, shared by
the batch, or the batch's other destinations) and samples its endpoints' neighbourhoods
without the batch's own edges (either direction, :mod:`dsgraph.distgraph.link_sampler`; over
RPC or, with ``sampled.local_sampling``, in the trainer's partition where it stores them).
``task.loss`` scores each positive against its negatives (BCE or InfoNCE);
``sampled.rematerialize`` and ``compression`` apply to the node model as in node tasks. The
node model's output is the embedding; the decoder (``task.decoder``) is a submodule of the
model (``link_decoder``), so DDP, Adam and checkpoints carry it. Evaluation ranks the held-out
edges of ``link_split.npz`` from exact layer-wise embeddings
(:mod:`dsgraph.distgraph.link_evaluate`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import dgl
import numpy as np
import torch
from torch import nn

from dsgraph import checkpoint, dist, remat
from dsgraph.compress import compression_context
from dsgraph.distgraph.evaluate import node_outputs, read_all
from dsgraph.distgraph.features import feature_cache
from dsgraph.distgraph.link_evaluate import EvalEdges, held_out_edges, link_metrics
from dsgraph.distgraph.link_sampler import PairExcludingSampler, edge_batch
from dsgraph.distgraph.local_sampler import LocalIndex, SampleCounter, local_frontier
from dsgraph.distgraph.prefetch import Prefetcher
from dsgraph.errors import DataError
from dsgraph.tasks.link_prediction import make_decoder
from dsgraph.trainer import Trainer
from dsgraph.modes.sampled import FanoutBlocks, SampledStrategy, check_fanouts

DEFAULT_HIDDEN = 128  # the built-in models' default model.args.hidden


def embedding_width(args: dict) -> int:
    """The embedding width: ``model.args.hidden`` (the built-in models' default otherwise)."""
    hidden = args.get("hidden", DEFAULT_HIDDEN)
    return hidden if isinstance(hidden, int) and not isinstance(hidden, bool) else DEFAULT_HIDDEN


class LinkSampledStrategy(SampledStrategy):
    """Sampled link prediction on a partitioned graph served by DistGraph."""

    def setup(self, trainer: Trainer) -> nn.Module:
        """Open the DistGraph, split the training edges over trainers, read the held-out
        edges, build model, decoder and feature cache."""
        self.g = g = dgl.distributed.DistGraph(os.environ["DSGRAPH_DGL_GRAPH"])
        self.pb = g.get_partition_book()
        conf = Path(os.environ["DGL_CONF_PATH"])
        meta = json.loads(conf.read_text())
        if "link_split" not in meta:
            raise DataError(f"{conf}: no link_split (held-out edges): the partitions were not "
                            f"made for link prediction; partition with task.name: "
                            f"link_prediction")
        train_eids = dgl.distributed.edge_split(
            torch.ones(g.num_edges(), dtype=torch.bool), self.pb, force_even=True)
        # the endpoints once, not one find_edges request per batch
        self.train_src, self.train_dst = g.find_edges(train_eids)
        width = embedding_width(self.cfg.model.args)
        self.task.bind(width)
        model = trainer.build_model(g.ndata["feat"].shape[1], self.task.head_width(width))
        check_fanouts(self.cfg, model)
        model.link_decoder = make_decoder(self.cfg.task.decoder, width).to(trainer.dtype)
        s = self.cfg.sampled
        # edge batches are not pre-sampled: remote rows are ranked by degree
        self.feat = feature_cache(g, s, self.cfg.cluster.trainers_per_machine)
        if s.rematerialize:
            remat.install(model)
        index = LocalIndex.build(g) if s.local_sampling else None
        self.sampler = PairExcludingSampler(s.fanouts, None if index is None else (
            lambda g, seeds, fanout: local_frontier(g, index, seeds, fanout)))
        self.counter = SampleCounter(g, index)
        self.ahead = Prefetcher(0 if s.rematerialize else s.prefetch)  # see SampledStrategy
        self.eval_edges = self._eval_edges(conf.parent / meta["link_split"], trainer)
        self.steps_per_epoch = (self.train_src.numel() + s.batch_size - 1) // s.batch_size
        return model

    def _eval_edges(self, path: Path, trainer: Trainer) -> dict[str, EvalEdges]:
        """This rank's share of the validation and test edges with their negatives, and each
        split's Hits@K negatives, in the partitioned graph's ids."""
        n = self.g.num_nodes()
        new_of = np.empty(n, dtype=np.int64)  # original id -> partitioned id
        new_of[read_all(self.g.ndata["orig_id"]).numpy()] = np.arange(n, dtype=np.int64)
        return {name: edges.mapped(new_of) for name, edges in held_out_edges(
            path, n, self.cfg.task, self.cfg.dataset.seed, trainer.rank, trainer.world).items()}

    def num_nodes(self) -> int:
        """Nodes of the whole graph (the range of ``python -m predict --pairs`` ids)."""
        return self.g.num_nodes()

    def train_epoch(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """One pass over this trainer's training edges in a fresh order."""
        seed = checkpoint.epoch_seed(self.cfg.train.seed, epoch, trainer.rank)
        order = torch.randperm(self.train_src.numel(),
                               generator=torch.Generator().manual_seed(seed))
        bs, t = self.cfg.sampled.batch_size, self.cfg.task
        decoder = trainer.model.link_decoder

        def batches_of_epoch():
            dgl.seed(seed)  # DGL's generator is per thread: seed the one that samples
            negatives = torch.Generator().manual_seed(seed)
            for start in range(0, order.numel(), bs):
                rows = order[start:start + bs]
                batch = edge_batch(self.g, self.sampler, self.train_src[rows],
                                   self.train_dst[rows], t.negatives, negatives,
                                   t.negative_sampler)
                self.counter.add(batch.blocks, all_local=False)
                x, blocks = self.inputs(batch.input_nodes, None, batch.blocks)
                yield batch, x, blocks

        loss_sum = edges_seen = batches = 0.0
        self.feat.remote_rows = self.feat.cache_hits = 0
        self.counter.reset()
        dist.barrier()  # every trainer starts the clock together (see SampledStrategy)
        t0 = time.perf_counter()
        with self.ddp.join():  # trainers may have unequal batch counts
            for batch, x, blocks in self.ahead(batches_of_epoch):
                with compression_context(self.cfg.compression):
                    h = self.ddp(FanoutBlocks(blocks, self.cfg), x)
                loss = self.task.edge_loss(*batch.scores(h, decoder))
                trainer.step(loss)
                loss_sum += loss.item() * len(batch.pos)
                edges_seen += len(batch.pos)
                batches += 1
                trainer.advance(loss=loss.item(),
                                edges_s=edges_seen / (time.perf_counter() - t0))
        train_s = dist.all_max([time.perf_counter() - t0])[0]
        total = dist.all_sum([loss_sum, edges_seen, batches,
                              self.feat.remote_rows * self.feat.row_bytes,
                              self.counter.requests, self.counter.remote_nodes])
        return {"loss": total[0] / max(total[1], 1.0), "samples_per_s": total[1] / train_s,
                "batches": int(total[2]), "remote_feature_bytes": int(total[3]),
                "rpc_sample_requests": int(total[4]), "remote_sampled_nodes": int(total[5])}

    def evaluate(self, trainer: Trainer, epoch: int) -> dict[str, Any]:
        """Validation and test MRR and Hits@K over all ranks' held-out edges."""
        s = self.cfg.sampled
        return link_metrics(trainer.model, trainer.model.link_decoder, self.g, self.task,
                            self.eval_edges, self._layerwise(trainer), s.fanouts,
                            s.eval_batch_size)

    # (pairs, 2) original node ids to score instead of exporting embeddings (predict --pairs)
    pairs: Optional[np.ndarray] = None

    def predict(self, trainer: Trainer, embeddings: bool) -> Optional[dict[str, Any]]:
        """Every node's embedding (the model's output), or with :attr:`pairs` those pairs'
        ``src``, ``dst``, ``score`` (logit) and ``prob``; read by rank 0."""
        s = self.cfg.sampled
        out = node_outputs(trainer.model, self.g, trainer.rank, self._layerwise(trainer),
                           s.fanouts, s.eval_batch_size)
        if out is None:
            return None
        if self.pairs is None:
            return self.task.outputs(out["logits"], {"node_id": out["node_id"].numpy()})
        row_of = np.empty(len(out["node_id"]), dtype=np.int64)  # original id -> row
        row_of[out["node_id"].numpy()] = np.arange(len(out["node_id"]), dtype=np.int64)
        h = out["logits"]
        u, v = (torch.from_numpy(row_of[self.pairs[:, i]]) for i in (0, 1))
        score = trainer.model.link_decoder(h[u], h[v]).double()
        return {"src": self.pairs[:, 0], "dst": self.pairs[:, 1],
                "score": score.float().numpy(), "prob": torch.sigmoid(score).float().numpy()}
