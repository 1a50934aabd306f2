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
    rows, in the partitioned graph's node ids."""

    pos: torch.Tensor
    neg_dst: torch.Tensor


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
def link_metrics(model: nn.Module, decoder: nn.Module, g, task: LinkPrediction,
                 splits: dict[str, EvalEdges], shared: torch.Tensor, layerwise: bool,
                 fanouts: list[int], batch_size: int) -> dict[str, Any]:
    """``<split>_mrr`` and ``<split>_hits<K>`` of every split over all ranks (collective)."""
    h = (layerwise_outputs(model, g, batch_size)[0] if layerwise
         else sampled_outputs(model, g, fanouts, batch_size)[0])
    shared_scores = torch.cat([_score(h, decoder, shared[a:a + _EDGES_PER_READ, 0],
                                      shared[a:a + _EDGES_PER_READ, 1])
                               for a in range(0, len(shared), _EDGES_PER_READ)])
    threshold = hits_threshold(shared_scores.double().numpy(), task.cfg.hits_k)
    parts = {}
    for name, edges in splits.items():
        rows = [torch.cat([_score(h, decoder, edges.pos[a:b, 0], edges.pos[a:b, 1]).unsqueeze(1),
                           _score(h, decoder, edges.pos[a:b, 0], edges.neg_dst[a:b])], 1)
                for a, b in ((a, a + _EDGES_PER_READ)
                             for a in range(0, len(edges.pos), _EDGES_PER_READ))]
        scores = torch.cat(rows) if rows else torch.zeros(0, 1 + edges.neg_dst.shape[1])
        parts[name] = (scores, torch.full((len(scores),), threshold, dtype=torch.float64))
    dist.barrier()  # the embedding DistTensor must outlive every rank's reads
    return split_figures(task, parts)
