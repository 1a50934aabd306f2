"""Node pairs for SAR link prediction: a full-graph source of the SAR runtime.

Each step the model forwards the whole partitioned graph (SAR, as node tasks do), giving every
worker its own nodes' embeddings. The graph is the training graph: validation and test edges
were removed before partitioning (:mod:`dsgraph.data.link_split`). As in OGB's full-batch GCN
link baselines, the supervision edges are also in the message-passing graph (there are no
batches to leave out).

- *Positives:* every undirected training pair {u, v}, u != v, once over all workers: the pair
  of an edge, in partitioned ids, belongs to the worker owning its larger id; each worker routes
  the pairs of its in-edges to their owners once at set-up and drops duplicates, so an edge
  stored in one direction or both counts once. The owned endpoint is the source.
- *Negatives:* ``task.negatives`` uniform destinations per positive, source kept, drawn from a
  generator seeded per (``train.seed``, epoch, rank) (:func:`dsgraph.checkpoint.epoch_seed`).
- *Scores* read embeddings of nodes other workers own through :mod:`dsgraph.sar.rows` (a
  differentiable fetch: gradients go back to the owners). The loss is ``task.edge_loss``
  summed, divided by the global term count, and gradients are summed over workers: the
  single-process mean over the same pairs (``tests/dist/test_sar_link.py``).
- *Evaluation* ranks the held-out edges exactly as the sampled strategy does (same negatives,
  seeds and share of rows per rank, :mod:`dsgraph.distgraph.link_evaluate`), from full-graph
  embeddings. ``python -m predict`` exports embeddings, or scores ``--pairs``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from dsgraph import checkpoint, dist
from dsgraph.distgraph.link_evaluate import held_out_edges
from dsgraph.errors import DataError
from dsgraph.partition.meta import read_meta
from dsgraph.partition.reader import LocalPartition
from dsgraph.sar.comm import Comm
from dsgraph.sar.rows import RowPlan, exchange, fetch_rows
from dsgraph.tasks.evaluation import split_figures
from dsgraph.tasks.link_prediction import (LinkPrediction, embedding_width, hits_threshold,
                                           make_decoder)
from dsgraph.trainer import Trainer
from dsgraph.modes.sar.source import FullGraphSource

EDGES_PER_FETCH = 1024  # held-out edges scored per row fetch (bounds the fetched rows)
PAIRS_PER_ROUND = 4096  # training positives scored per row fetch (bounds the step's memory)


def training_pairs(part: LocalPartition, comm: Comm) -> torch.Tensor:
    """This worker's positives (P, 2), global partitioned ids ``[own endpoint, other]``: the
    undirected pairs of the graph's edges (no self-loops) whose larger id it owns, each once
    (collective: every worker calls it)."""
    ranges, n = part.node_ranges, part.num_global
    s, d = part.src, part.dst + ranges[part.rank]
    keep = s != d
    big, small = torch.maximum(s[keep], d[keep]), torch.minimum(s[keep], d[keep])
    owner = torch.bucketize(big, ranges[1:], right=True)
    pairs = torch.stack([big, small], 1)
    if comm.world > 1:  # an edge lives with its destination: pairs of larger sources move
        got = exchange({q: pairs[owner == q] for q in range(comm.world) if q != comm.rank},
                       comm.rank, comm.world)
        pairs = torch.cat([pairs[owner == comm.rank], *got.values()])
    keys = torch.unique(pairs[:, 0] * n + pairs[:, 1])
    return torch.stack([keys // n, keys % n], 1)


def pair_scores(h: torch.Tensor, decoder: nn.Module, src: torch.Tensor, dst: torch.Tensor,
                ranges: torch.Tensor, comm: Comm) -> torch.Tensor:
    """Decoder scores of ``(src[i], dst[i, j])`` (global ids; ``dst`` (P,) or (P, C)) from the
    workers' own embedding rows ``h`` (collective; differentiable)."""
    rows = fetch_rows(h, RowPlan(torch.cat([src, dst.reshape(-1)]), ranges, comm))
    hs, hd = rows[:len(src)], rows[len(src):].reshape(*dst.shape, *rows.shape[1:])
    return decoder(hs.unsqueeze(1).expand_as(hd) if dst.dim() == 2 else hs, hd)


def link_loss(task: LinkPrediction, decoder: nn.Module, h: torch.Tensor, pos: torch.Tensor,
              neg: torch.Tensor, ranges: torch.Tensor, comm: Comm, scale: float,
              chunk: int = PAIRS_PER_ROUND) -> tuple[torch.Tensor, float]:
    """``task.edge_loss`` summed over this worker's positives ``pos`` (P, 2) and their negative
    destinations ``neg`` (P, K), divided by ``scale``: (a stand-in whose gradient is the loss's,
    the loss's value). Collective.

    The pairs are scored and differentiated ``chunk`` positives at a time (one row fetch each,
    as many rounds on every worker) against a detached copy of ``h``, so only one round's rows
    are alive, never one per pair; the rounds' gradients of ``h`` and of the decoder are summed
    and the stand-in ``(h * dh).sum() + sum(p * dp)`` hands them to one backward of the model.
    """
    rounds = int(dist.all_max([math.ceil(len(pos) / chunk)])[0])
    leaf = h.detach().requires_grad_()
    params = [p for p in decoder.parameters() if p.requires_grad]
    dh, dparams, total = torch.zeros_like(leaf), [torch.zeros_like(p) for p in params], 0.0
    for a in range(0, rounds * chunk, chunk):
        p, n = pos[a:a + chunk], neg[a:a + chunk]
        scores = pair_scores(leaf, decoder, p[:, 0], torch.cat([p[:, 1:], n], 1), ranges, comm)
        loss = task.edge_loss(scores[:, 0], scores[:, 1:], "sum") / scale
        # an empty round still runs the fetch's backward: the other workers' rounds need it
        grads = torch.autograd.grad(loss, [leaf, *params])
        total += loss.item()
        dh += grads[0]
        for acc, g in zip(dparams, grads[1:]):
            acc += g
        del scores, loss, grads
    stand_in = (h * dh).sum() + sum((p * g).sum() for p, g in zip(params, dparams))
    return stand_in, total


class LinkPairs(FullGraphSource):
    """Every undirected training pair once over the workers, with fresh negatives per epoch
    (see the module docstring)."""

    task: LinkPrediction

    def setup(self, trainer: Trainer) -> nn.Module:
        """This worker's positives and its share of the held-out edges; model and decoder."""
        part_json, w = self.part_json, self.w
        meta = read_meta(part_json)
        if "link_split" not in meta:
            raise DataError(f"{part_json}: no link_split (held-out edges): the partitions were "
                            f"not made for link prediction; partition with task.name: "
                            f"link_prediction")
        self.ranges, n = w.part.node_ranges, w.part.num_global
        self.pos = training_pairs(w.part, w.comm)
        positives = int(dist.all_sum([float(len(self.pos))])[0])
        if positives == 0:
            raise DataError(f"{part_json}: the partitioned graph has no training edge")
        self.loss_terms = self.task.loss_count(positives, self.cfg.task.negatives)
        # partitioned id -> original id, every worker's rows in rank order
        orig = torch.cat(dist.gather_values(w.part.ndata["orig_id"].to(torch.int64))).numpy()
        self.new_of = np.empty(n, dtype=np.int64)
        self.new_of[orig] = np.arange(n, dtype=np.int64)
        self.eval_edges = {name: edges.mapped(self.new_of) for name, edges in held_out_edges(
            Path(part_json).parent / meta["link_split"], n, self.cfg.task, self.cfg.dataset.seed,
            trainer.rank, trainer.world).items()}
        width = embedding_width(self.cfg.model.args)
        self.task.bind(width)
        model = trainer.build_model(self.x.shape[1], self.task.head_width(width))
        model.link_decoder = make_decoder(self.cfg.task.decoder, width).to(trainer.dtype)
        return model

    def loss(self, trainer: Trainer, h: torch.Tensor,
             epoch: int) -> tuple[torch.Tensor, float, list[float]]:
        """Every training pair against fresh negatives (:func:`link_loss`)."""
        gen = torch.Generator().manual_seed(
            checkpoint.epoch_seed(self.cfg.train.seed, epoch, trainer.rank))
        neg = torch.randint(0, len(self.new_of), (len(self.pos), self.cfg.task.negatives),
                            generator=gen)
        stand_in, loss = link_loss(self.task, trainer.model.link_decoder, h, self.pos, neg,
                                   self.ranges, self.w.comm, self.loss_terms)
        return stand_in, loss, []

    @torch.no_grad()
    def _scores(self, h: torch.Tensor, decoder: nn.Module, src: torch.Tensor,
                dst: torch.Tensor) -> torch.Tensor:
        """:func:`pair_scores` in rounds of :data:`EDGES_PER_FETCH` rows, as many on every
        worker (collective)."""
        rounds = int(dist.all_max([math.ceil(len(src) / EDGES_PER_FETCH)])[0])
        out = [pair_scores(h, decoder, src[a:a + EDGES_PER_FETCH], dst[a:a + EDGES_PER_FETCH],
                           self.ranges, self.w.comm)
               for a in range(0, rounds * EDGES_PER_FETCH, EDGES_PER_FETCH)]
        return torch.cat(out) if out else h.new_zeros((0,) + tuple(dst.shape[1:]))

    def evaluate(self, trainer: Trainer, h: torch.Tensor) -> dict[str, Any]:
        """Validation and test MRR and Hits@K over all workers' held-out edges."""
        decoder = trainer.model.link_decoder
        parts = {}
        for name, e in self.eval_edges.items():
            # each worker scores its share of the Hits@K pairs; all see every score
            mine = e.hits_pairs[trainer.rank::trainer.world]
            hits = dist.gather_values(self._scores(h, decoder, mine[:, 0], mine[:, 1]))
            threshold = hits_threshold(torch.cat(hits).double().numpy(), self.cfg.task.hits_k)
            # column 0 the positive, then its negatives
            scores = self._scores(h, decoder, e.pos[:, 0],
                                  torch.cat([e.pos[:, 1:], e.neg_dst], 1))
            parts[name] = (scores, torch.full((len(scores),), threshold, dtype=torch.float64))
        return split_figures(self.task, parts)

    def predict(self, trainer: Trainer, embeddings: bool,
                pairs: Optional[np.ndarray]) -> Optional[dict[str, Any]]:
        """Every node's embedding (the model's output), or ``pairs``' ``src``, ``dst``,
        ``score`` (logit) and ``prob``; read by rank 0."""
        if pairs is None:
            return self.node_outputs(trainer, False)  # the output is the embedding
        h = trainer.model(self.w.graph, self.x)
        asked = pairs if trainer.rank == 0 else np.zeros((0, 2), dtype=np.int64)
        ids = torch.from_numpy(self.new_of[asked])
        score = self._scores(h, trainer.model.link_decoder, ids[:, 0], ids[:, 1])
        return self.task.pair_outputs(pairs, score) if trainer.rank == 0 else None
