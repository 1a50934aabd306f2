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

from typing import Optional

import dgl
import numpy as np
import torch

from dsgraph.data.link_split import pair_keys


class PairExcludingSampler(dgl.dataloading.NeighborSampler):
    """DGL's ``NeighborSampler`` (uniform, ``fanouts`` per layer) whose frontiers lose every
    edge joining a pair of ``exclude`` (either direction)."""

    def sample_pairs(self, g, seed_nodes: torch.Tensor, exclude: Optional[torch.Tensor]
                     ) -> tuple[torch.Tensor, torch.Tensor, list]:
        """(input nodes, seeds, blocks) of ``seed_nodes``; ``exclude``: (pairs, 2) node ids."""
        keys = None if exclude is None or not len(exclude) else np.unique(pair_keys(
            exclude[:, 0].numpy(), exclude[:, 1].numpy(), g.num_nodes()))
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            frontier = g.sample_neighbors(seed_nodes, fanout)
            if keys is not None:
                src, dst = (t.numpy() for t in frontier.edges())
                drop = np.flatnonzero(np.isin(pair_keys(src, dst, g.num_nodes()), keys))
                if drop.size:
                    frontier = dgl.remove_edges(frontier, torch.from_numpy(drop))
            block = dgl.to_block(frontier, seed_nodes)
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


class EdgeBatch:
    """One mini-batch: ``seeds`` (the endpoints, unique), the positive and negative pairs as
    rows of ``seeds`` (``pos``, ``neg``: (edges, 2)), the sampled ``blocks`` and
    ``input_nodes``."""

    def __init__(self, input_nodes: torch.Tensor, seeds: torch.Tensor, pos: torch.Tensor,
                 neg: torch.Tensor, blocks: list) -> None:
        self.input_nodes, self.seeds, self.pos, self.neg, self.blocks = (
            input_nodes, seeds, pos, neg, blocks)

    def labels(self) -> torch.Tensor:
        """1 for each positive, 0 for each negative, in the order of :meth:`pairs`."""
        return torch.cat([torch.ones(len(self.pos)), torch.zeros(len(self.neg))])

    def pairs(self) -> torch.Tensor:
        """Positives then negatives, as rows of the seeds' outputs."""
        return torch.cat([self.pos, self.neg])


def edge_batch(g, sampler: PairExcludingSampler, eids: torch.Tensor, negatives: int,
               generator: torch.Generator) -> EdgeBatch:
    """The batch of training edges ``eids``: ``negatives`` per edge with the edge's source and a
    uniform destination (DGL's ``negative_sampler.Uniform`` rule, drawn from ``generator``);
    the positives' pairs excluded from the sampled neighbourhoods."""
    src, dst = g.find_edges(eids)
    neg_src = src.repeat_interleave(negatives)
    neg_dst = torch.randint(0, g.num_nodes(), (neg_src.numel(),), generator=generator)
    ends = torch.cat([src, dst, neg_src, neg_dst])
    seeds, rows = torch.unique(ends, return_inverse=True)
    m, k = src.numel(), neg_src.numel()
    pos = torch.stack([rows[:m], rows[m:2 * m]], 1)
    neg = torch.stack([rows[2 * m:2 * m + k], rows[2 * m + k:]], 1)
    input_nodes, _, blocks = sampler.sample_pairs(g, seeds, torch.stack([src, dst], 1))
    return EdgeBatch(input_nodes, seeds, pos, neg, blocks)
