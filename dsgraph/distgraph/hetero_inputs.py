"""Input rows of a heterogeneous mini-batch: each node type's ``feat`` read from DistGraph, or,
for a type without features, a learnable embedding held by the DistGraph servers.

The embeddings are DGL ``DistEmbedding`` tables (one per featureless type, rows partitioned like
the type's nodes), updated sparsely by DGL's distributed ``SparseAdam`` as DGL's distributed
RGCN example does: a trainer never holds a whole table. They are part of the model's state
(:meth:`HeteroInputs.get_extra_state`) so a checkpoint, a resumed run and ``python -m predict``
see the trained rows; the sparse optimizer's moments are not checkpointed.
"""
from __future__ import annotations

from typing import Any, Optional

import dgl
import torch
from torch import nn

# Rows read per request when a checkpoint gathers or restores an embedding table.
STATE_CHUNK_ROWS = 1 << 18


def init_embedding(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """DistEmbedding initialiser: uniform in [-1, 1], as DGL's RGCN example initialises them."""
    return torch.empty(shape, dtype=dtype).uniform_(-1.0, 1.0)


class HeteroInputs(nn.Module):
    """``forward(input_nodes)``: ``{ntype: rows}`` of a batch's input nodes (per-type ids)."""

    def __init__(self, g, embedding_dim: int) -> None:
        super().__init__()
        self.g = g
        self.features = {t: g.nodes[t].data["feat"] for t in g.ntypes
                         if "feat" in g.nodes[t].data}
        self.embeddings = {
            t: dgl.distributed.DistEmbedding(g.num_nodes(t), embedding_dim, name=f"embed-{t}",
                                             init_func=init_embedding,
                                             part_policy=g.get_node_partition_policy(t))
            for t in g.ntypes if t not in self.features}

    @property
    def widths(self) -> dict[str, int]:
        """Input width of every node type (a model's ``in_feats``)."""
        return {**{t: int(f.shape[1]) for t, f in self.features.items()},
                **{t: int(e.embedding_dim) for t, e in self.embeddings.items()}}

    def sparse_optimizer(self, lr: float) -> Optional[Any]:
        """DGL's distributed SparseAdam over the embeddings (None without featureless types).
        Its ``step`` is collective: every trainer calls it once per batch."""
        if not self.embeddings:
            return None
        return dgl.distributed.optim.SparseAdam(list(self.embeddings.values()), lr=lr)

    def forward(self, input_nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The rows of every type's input nodes; embedding rows record their gradient trace
        only while training."""
        x = {}
        for t, ids in input_nodes.items():
            if t in self.features:
                x[t] = self.features[t][ids]
            elif self.training:
                x[t] = self.embeddings[t](ids)
            else:  # evaluation: read the rows without adding to the optimizer's trace
                x[t] = self.embeddings[t].weight[ids]
        return x

    def get_extra_state(self) -> dict[str, torch.Tensor]:
        """Every embedding table, whole (read from the servers in chunks)."""
        state = {}
        for t, emb in self.embeddings.items():
            n = emb.num_embeddings
            state[t] = torch.cat([emb.weight[torch.arange(i, min(i + STATE_CHUNK_ROWS, n))]
                                  for i in range(0, n, STATE_CHUNK_ROWS)]) if n else \
                torch.zeros(0, emb.embedding_dim)
        return state

    def set_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        """Write this trainer's partition's rows of every table back to the servers (every
        partition's trainers write their own, so the whole table is restored)."""
        pb = self.g.get_partition_book()
        for t, emb in self.embeddings.items():
            rows = state[t]
            if rows.shape != (emb.num_embeddings, emb.embedding_dim):
                raise ValueError(f"embedding of node type {t!r}: expected a checkpointed table "
                                 f"of shape {(emb.num_embeddings, emb.embedding_dim)}, got "
                                 f"{tuple(rows.shape)}")
            ids = pb.partid2nids(pb.partid, t)
            for i in range(0, ids.numel(), STATE_CHUNK_ROWS):
                chunk = ids[i:i + STATE_CHUNK_ROWS]
                emb.weight[chunk] = rows[chunk]


class HeteroNet(nn.Module):
    """The trained module: :class:`HeteroInputs` then the user's relational model; returns the
    target type's output rows."""

    def __init__(self, inputs: HeteroInputs, model: nn.Module, target: str) -> None:
        super().__init__()
        self.inputs, self.model, self.target = inputs, model, target

    def forward(self, blocks, input_nodes: dict[str, torch.Tensor]) -> torch.Tensor:
        """Output rows of the batch's target-type seeds."""
        out = self.model(blocks, self.inputs(input_nodes))
        return out[self.target] if isinstance(out, dict) else out
