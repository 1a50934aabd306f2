"""Relational models for heterogeneous graphs (RGCN, RGAT), built from ``dgl.nn.HeteroGraphConv``.

Contract of every heterogeneous model dsgraph trains (built-in or a user's
``package.module:ClassName``): ``Model(in_feats, num_classes, etypes, **model.args)`` where
``in_feats`` maps each node type to its input width (its ``feat`` width, or
``sampled.embedding_dim`` for a type without features) and ``etypes`` lists the canonical edge
types ``(src_type, relation, dst_type)``; ``forward(blocks, x)`` takes one DGL block per layer
and ``x``, the input rows of each node type of ``blocks[0]``'s sources, and returns a dict of
output rows per node type (the trainer reads the target type's) or the target type's rows.
``num_layers`` says how many blocks it consumes.
"""
from __future__ import annotations

import abc
from typing import Sequence

import dgl.nn as dglnn
import torch
from torch import nn

from dsgraph.models.gnn import LeanGraphConv

CanonicalEtype = tuple[str, str, str]


class RelationalStack(nn.Module, abc.ABC):
    """Layers of per-relation convolutions summed per destination type, plus a self-loop
    linear map per node type (RGCN's ``W_0 h_v``), with ReLU and dropout between layers."""

    def __init__(self, in_feats: dict[str, int], num_classes: int, etypes: Sequence[CanonicalEtype],
                 hidden: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers: expected >= 1, got {num_layers}")
        self.etypes = [tuple(e) for e in etypes]
        ntypes = sorted(in_feats)
        widths = [dict(in_feats)] + [{t: hidden for t in ntypes}] * (num_layers - 1)
        outs = [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList()
        self.self_loops = nn.ModuleList()
        for i, (w_in, w_out) in enumerate(zip(widths, outs)):
            last = i == num_layers - 1
            mods = {rel: self.relation_conv(w_in[src], w_in[dst], w_out, last)
                    for src, rel, dst in self.etypes}
            self.layers.append(dglnn.HeteroGraphConv(mods, aggregate="sum"))
            self.self_loops.append(nn.ModuleDict({t: nn.Linear(w_in[t], w_out) for t in ntypes}))
        self.dropout = nn.Dropout(dropout)

    @abc.abstractmethod
    def relation_conv(self, src_width: int, dst_width: int, out_width: int,
                      last: bool) -> nn.Module:
        """The convolution of one relation in one layer (``last``: the output layer)."""

    @property
    def num_layers(self) -> int:
        """Message-passing layers (= blocks consumed)."""
        return len(self.layers)

    def forward_layer(self, i: int, block, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Layer ``i`` over ``block``: relation messages summed per type, plus the self-loop."""
        dst = {t: v[:block.num_dst_nodes(t)] for t, v in h.items() if t in block.dsttypes}
        out = self.layers[i](block, (h, dst))
        out = {t: self._flat(v) + self.self_loops[i][t](dst[t]) for t, v in out.items()}
        if i < len(self.layers) - 1:
            out = {t: self.dropout(torch.relu(v)) for t, v in out.items()}
        return out

    @staticmethod
    def _flat(h: torch.Tensor) -> torch.Tensor:
        return h.flatten(1) if h.dim() == 3 else h  # attention heads are concatenated

    def forward(self, blocks, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run every layer, one block each."""
        h = x
        for i, block in enumerate(blocks[:len(self.layers)]):
            h = self.forward_layer(i, block, h)
        return h


class RGCN(RelationalStack):
    """Relational GCN (Schlichtkrull et al.): a right-normalised ``GraphConv`` per relation
    (:class:`~dsgraph.models.gnn.LeanGraphConv`: DGL's parameters and function)."""

    def __init__(self, in_feats: dict[str, int], num_classes: int,
                 etypes: Sequence[CanonicalEtype], hidden: int = 64, num_layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__(in_feats, num_classes, etypes, hidden, num_layers, dropout)

    def relation_conv(self, src_width: int, dst_width: int, out_width: int,
                      last: bool) -> nn.Module:
        """Mean of the relation's neighbours and a linear map, in the cheaper order for each
        block (no bias: the self-loop has it)."""
        return LeanGraphConv(src_width, out_width, norm="right", bias=False,
                             allow_zero_in_degree=True)


class RGAT(RelationalStack):
    """Relational GAT: a ``GATConv`` per relation; hidden layers concatenate ``heads`` heads of
    ``hidden // heads`` columns, the output layer has one head."""

    def __init__(self, in_feats: dict[str, int], num_classes: int,
                 etypes: Sequence[CanonicalEtype], hidden: int = 64, num_layers: int = 2,
                 heads: int = 4, dropout: float = 0.5) -> None:
        if hidden % heads:
            raise ValueError(f"hidden: expected a multiple of heads ({heads}), got {hidden}")
        self.heads = heads
        super().__init__(in_feats, num_classes, etypes, hidden, num_layers, dropout)

    def relation_conv(self, src_width: int, dst_width: int, out_width: int,
                      last: bool) -> nn.Module:
        """Attention over the relation's neighbours; hidden layers split their width over heads."""
        heads = 1 if last else self.heads
        return dglnn.GATConv((src_width, dst_width), out_width // heads, heads,
                             allow_zero_in_degree=True, bias=False)
