"""Mini-batches of training edges over a DistGraph for link prediction: positives, uniform
negatives and the neighbourhoods of their endpoints with the batch's own edges left out.

DGL 2.1's ``DistGraph.sample_neighbors`` accepts ``exclude_edges`` and ignores it (and its
``edge_subgraph`` lacks the ``output_device`` that ``as_edge_prediction_sampler`` passes), so
stock ``DistEdgeDataLoader(..., exclude='self')`` would let every positive edge be seen by
message passing while the model learns to predict it. :class:`PairExcludingSampler` removes the
batch's edges from each sampled frontier itself, by unordered node pair: an edge and its
reverse both go (``exclude='reverse_id'`` on a graph holding both directions), without a
reverse-edge map.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import dgl
import numpy as np
import torch
from torch import nn

from dsgraph.data.link_split import pair_keys


Frontier = Callable[[Any, torch.Tensor, int], dgl.DGLGraph]


class PairExcludingSampler(dgl.dataloading.NeighborSampler):
    """DGL's ``NeighborSampler`` (uniform, ``fanouts`` per layer) whose frontiers lose every
    edge joining a pair of ``exclude`` (either direction).

    ``frontier(g, seeds, fanout)`` draws one layer's frontier: DGL's distributed
    ``sample_neighbors`` by default; :func:`dsgraph.distgraph.local_sampler.local_frontier`
    samples what the trainer's partition stores in full without RPC
    (``sampled.local_sampling``)."""

    def __init__(self, fanouts: list[int], frontier: Optional[Frontier] = None) -> None:
        super().__init__(fanouts)
        self.frontier = frontier or (lambda g, seeds, fanout: g.sample_neighbors(seeds, fanout))

    def sample_pairs(self, g, seed_nodes: torch.Tensor, exclude: Optional[torch.Tensor]
                     ) -> tuple[torch.Tensor, torch.Tensor, list]:
        """(input nodes, seeds, blocks) of ``seed_nodes``; ``exclude``: (pairs, 2) node ids."""
        keys = None if exclude is None or not len(exclude) else np.unique(pair_keys(
            exclude[:, 0].numpy(), exclude[:, 1].numpy(), g.num_nodes()))
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            frontier = self.frontier(g, seed_nodes, fanout)
            if keys is not None:
                src, dst = (t.numpy() for t in frontier.edges())
                drop = np.flatnonzero(_sorted_member(pair_keys(src, dst, g.num_nodes()), keys))
                if drop.size:
                    frontier = dgl.remove_edges(frontier, torch.from_numpy(drop))
            block = dgl.to_block(frontier, seed_nodes)
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


def _sorted_member(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.isin(values, keys)`` for sorted unique ``keys``: a binary search per value instead
    of sorting both arrays (the frontier's edges outnumber the batch's keys many times)."""
    pos = np.searchsorted(keys, values).clip(max=len(keys) - 1)
    return keys[pos] == values


class EdgeBatch:
    """One mini-batch: ``seeds`` (the endpoints, unique), the positive pairs as rows of
    ``seeds`` (``pos``: (P, 2)), the negatives' destination rows (``neg_dst``: (P, K) with
    ``uniform``, (K,) shared with ``joint``, None with ``in_batch``: the other positives'
    destinations), the sampled ``blocks`` and ``input_nodes``."""

    def __init__(self, input_nodes: torch.Tensor, seeds: torch.Tensor, pos: torch.Tensor,
                 neg_dst: Optional[torch.Tensor], blocks: list) -> None:
        self.input_nodes, self.seeds, self.pos, self.neg_dst, self.blocks = (
            input_nodes, seeds, pos, neg_dst, blocks)

    def scores(self, h: torch.Tensor, decoder: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """The positives' scores (P,) and each positive's negative scores (P, K) from the seeds'
        embeddings ``h``: the positive's source against every negative destination."""
        hu, hv = h[self.pos[:, 0]], h[self.pos[:, 1]]
        pos = decoder(hu, hv)
        if self.neg_dst is None:  # in-batch: every other positive's destination
            n = len(hu)
            # the off-diagonal entries by slicing, not a boolean mask: its backward is a copy
            # instead of an n * n scatter
            every = decoder.pairwise(hu, hv).flatten()[1:]
            return pos, every.reshape(n - 1, n + 1)[:, :-1].reshape(n, n - 1) if n > 1 \
                else every.reshape(n, 0)
        if self.neg_dst.dim() == 1:  # joint: one shared set
            return pos, decoder.pairwise(hu, h[self.neg_dst])
        hn = h[self.neg_dst.reshape(-1)].reshape(*self.neg_dst.shape, -1)
        return pos, decoder(hu.unsqueeze(1).expand_as(hn), hn)


def negative_count(kind: str, negatives: int, edges: int) -> int:
    """Negative destinations a batch of ``edges`` training edges draws (``task.negative_sampler``
    ``kind``)."""
    return 0 if kind == "in_batch" else negatives * (edges if kind == "uniform" else 1)


def edge_batch(g, sampler: PairExcludingSampler, src: torch.Tensor, dst: torch.Tensor,
               negatives: int, generator: torch.Generator, kind: str = "uniform") -> EdgeBatch:
    """The batch of training edges ``src[i] -> dst[i]`` with its negatives
    (``task.negative_sampler`` ``kind``): ``uniform``, ``negatives`` uniform destinations per edge with the edge's source
    (DGL's ``negative_sampler.Uniform`` rule); ``joint``, ``negatives`` uniform destinations
    shared by the batch (GraphStorm's joint sampler); ``in_batch``, the batch's other
    destinations (no node added). Draws come from ``generator``; the positives' pairs are
    excluded from the sampled neighbourhoods."""
    m = src.numel()
    neg = torch.randint(0, g.num_nodes(), (negative_count(kind, negatives, m),),
                        generator=generator)
    seeds, rows = torch.unique(torch.cat([src, dst, neg]), return_inverse=True)
    pos = torch.stack([rows[:m], rows[m:2 * m]], 1)
    neg_dst = None if kind == "in_batch" else rows[2 * m:]
    if kind == "uniform":
        neg_dst = neg_dst.reshape(m, negatives)
    input_nodes, _, blocks = sampler.sample_pairs(g, seeds, torch.stack([src, dst], 1))
    return EdgeBatch(input_nodes, seeds, pos, neg_dst, blocks)
