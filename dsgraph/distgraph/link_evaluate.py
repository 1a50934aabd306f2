"""Link prediction's evaluation over a DistGraph: every node's embedding (exact layer-wise, or
sampled), then each rank scores its share of the held-out edges against fixed negatives.

The negatives are drawn once from a seed, in original node ids (the same whatever the
partitioning), identically on every rank; rank r scores rows r, r + world, ... of each split.
MRR and Hits@K are then sums over ranks (:class:`dsgraph.tasks.link_prediction.LinkPrediction`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from dsgraph import dist
from dsgraph.distgraph.evaluate import layerwise_outputs, sampled_outputs
from dsgraph.tasks.evaluation import split_figures
from dsgraph.tasks.link_prediction import LinkPrediction, hits_threshold

_EDGES_PER_READ = 1024  # held-out edges scored per DistTensor read (bounds memory and messages)


@dataclass
class EvalEdges:
    """A split's positives (P, 2) and each one's negative destinations (P, K), this rank's
    rows, and the split's Hits@K negative pairs (M, 2), all ranks' (ids as the caller
    maps them: original in :func:`held_out_edges`, then the graph's own)."""

    pos: torch.Tensor
    neg_dst: torch.Tensor
    hits_pairs: torch.Tensor

    def mapped(self, new_of: np.ndarray) -> "EvalEdges":
        """The same edges in another id space (``new_of[original id]``)."""
        return EvalEdges(*(torch.from_numpy(new_of[t.numpy()])
                           for t in (self.pos, self.neg_dst, self.hits_pairs)))


def held_out_edges(path: Any, num_nodes: int, task: Any, seed: int, rank: int,
                   world: int) -> dict[str, EvalEdges]:
    """``val`` and ``test`` of a ``link_split.npz`` (original node ids): this rank's share of
    the positives with their negatives, the dataset's own where it gives them (OGB's
    ``*_neg_dst`` per positive, ``*_neg_pairs`` shared) else drawn with ``seed``
    (``task.eval_negatives`` per positive, ``task.hits_negatives`` pairs shared by both
    splits)."""
    out = {}
    with np.load(path) as split:
        for i, name in enumerate(("val", "test")):
            pos = split[name]
            neg = split[f"{name}_neg_dst"] if f"{name}_neg_dst" in split.files else \
                eval_negatives(pos, num_nodes, task.eval_negatives, seed + i)
            hits = split[f"{name}_neg_pairs"] if f"{name}_neg_pairs" in split.files else \
                shared_negatives(num_nodes, task.hits_negatives, seed)
            mine = rank_share(np.arange(len(pos)), rank, world)
            out[name] = EvalEdges(*(torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
                                    for a in (pos[mine], neg[mine], hits)))
    return out


def eval_negatives(pairs: np.ndarray, num_nodes: int, k: int, seed: int) -> np.ndarray:
    """``k`` uniform destinations per positive pair (original ids), one fixed draw per
    ``seed`` (the same on every rank and in every epoch)."""
    return np.random.default_rng([seed, 35]).integers(0, num_nodes, (len(pairs), k))


def shared_negatives(num_nodes: int, count: int, seed: int) -> np.ndarray:
    """``count`` uniform node pairs (original ids) that every positive of Hits@K competes
    with (OGB's shared negative edges), one fixed draw per ``seed``."""
    return np.random.default_rng([seed, 36]).integers(0, num_nodes, (count, 2))


def rank_share(rows: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Rows ``rank``, ``rank + world``, ... (each row on exactly one rank)."""
    return rows[rank::world]


@torch.no_grad()
def _score(h, decoder: nn.Module, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decoder scores of node pairs (u[i], v[i]...) read from the embedding DistTensor ``h``;
    ``v`` may hold several columns per ``u`` row."""
    hu = h[u]
    hv = h[v.reshape(-1)].reshape(*v.shape, -1)
    return decoder(hu.unsqueeze(1).expand_as(hv) if v.dim() == 2 else hu, hv)


@torch.no_grad()
def split_scores(h: Any, decoder: nn.Module, edges: EvalEdges,
                 hits_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(this rank's positives x (1 + K) scores, each row's Hits@K threshold) of one split;
    ``h[ids]`` reads embeddings (a tensor, or a DistTensor read in bounded pieces)."""
    pairs = edges.hits_pairs
    hits_scores = torch.cat([_score(h, decoder, pairs[a:a + _EDGES_PER_READ, 0],
                                    pairs[a:a + _EDGES_PER_READ, 1])
                             for a in range(0, len(pairs), _EDGES_PER_READ)])
    threshold = hits_threshold(hits_scores.double().numpy(), hits_k)
    rows = [torch.cat([_score(h, decoder, edges.pos[a:b, 0], edges.pos[a:b, 1]).unsqueeze(1),
                       _score(h, decoder, edges.pos[a:b, 0], edges.neg_dst[a:b])], 1)
            for a, b in ((a, a + _EDGES_PER_READ)
                         for a in range(0, len(edges.pos), _EDGES_PER_READ))]
    scores = torch.cat(rows) if rows else torch.zeros(0, 1 + edges.neg_dst.shape[1])
    return scores, torch.full((len(scores),), threshold, dtype=torch.float64)


@torch.no_grad()
def link_metrics(model: nn.Module, decoder: nn.Module, g, task: LinkPrediction,
                 splits: dict[str, EvalEdges], layerwise: bool, fanouts: list[int],
                 batch_size: int) -> dict[str, Any]:
    """``<split>_mrr`` and ``<split>_hits<K>`` of every split over all ranks (collective)."""
    h = (layerwise_outputs(model, g, batch_size)[0] if layerwise
         else sampled_outputs(model, g, fanouts, batch_size)[0])
    parts = {name: split_scores(h, decoder, edges, task.cfg.hits_k)
             for name, edges in splits.items()}
    dist.barrier()  # the embedding DistTensor must outlive every rank's reads
    return split_figures(task, parts)
