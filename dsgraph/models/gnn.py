"""Stacked message-passing classifiers (GraphSAGE, GCN, GAT) built from ``dgl.nn`` layers.

Contract shared by every model dsgraph trains (see README, "Plugging in a model"):
``Model(in_feats, num_classes, **model.args)``; ``forward(blocks, x)`` with one block per layer
in sampled mode, or ``forward(graph, x)`` with the same graph for every layer in full-graph mode.
Built-in models also offer ``forward_layer(i, graph, h)`` so evaluation can run layer by layer
over all neighbours.
"""
from __future__ import annotations

from typing import Sequence

import dgl.nn as dglnn
import torch
from torch import nn


class StackedGNN(nn.Module):
    """A stack of graph layers with activation and dropout between them."""

    def __init__(self, layers: Sequence[nn.Module], dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)

    @property
    def num_layers(self) -> int:
        """Number of message-passing layers (= blocks consumed in sampled mode)."""
        return len(self.layers)

    def _post(self, h: torch.Tensor) -> torch.Tensor:
        return h.flatten(1) if h.dim() == 3 else h  # GAT heads are concatenated

    def forward_layer(self, i: int, graph, h: torch.Tensor) -> torch.Tensor:
        """Apply layer ``i`` (with activation and dropout unless it is the last one)."""
        h = self._post(self.layers[i](graph, h))
        if i < len(self.layers) - 1:
            h = self.dropout(torch.relu(h))
        return h

    def forward(self, graph_or_blocks, x: torch.Tensor) -> torch.Tensor:
        """Run all layers; a list means one block per layer, a graph is reused by every layer."""
        blocks = graph_or_blocks if isinstance(graph_or_blocks, (list, tuple)) else None
        h = x
        for i in range(len(self.layers)):
            h = self.forward_layer(i, blocks[i] if blocks is not None else graph_or_blocks, h)
        return h


def _dims(in_feats: int, hidden: int, num_classes: int, num_layers: int) -> list[tuple[int, int]]:
    sizes = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
    return list(zip(sizes[:-1], sizes[1:]))


class GraphSAGE(StackedGNN):
    """GraphSAGE with ``dgl.nn.SAGEConv`` (aggregator mean, pool, gcn or lstm)."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 aggregator: str = "mean", dropout: float = 0.0) -> None:
        super().__init__([dglnn.SAGEConv(i, o, aggregator)
                          for i, o in _dims(in_feats, hidden, num_classes, num_layers)], dropout)


class GCN(StackedGNN):
    """GCN with ``dgl.nn.GraphConv`` (symmetric normalisation, zero in-degree allowed)."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 norm: str = "both", dropout: float = 0.0) -> None:
        super().__init__([dglnn.GraphConv(i, o, norm=norm, allow_zero_in_degree=True)
                          for i, o in _dims(in_feats, hidden, num_classes, num_layers)], dropout)


class GAT(StackedGNN):
    """GAT with ``dgl.nn.GATConv``; hidden layers concatenate ``heads`` heads, the last has one."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 32, num_layers: int = 2,
                 heads: int = 4, dropout: float = 0.0) -> None:
        layers: list[nn.Module] = []
        dim = in_feats
        for _ in range(num_layers - 1):
            layers.append(dglnn.GATConv(dim, hidden, heads, allow_zero_in_degree=True))
            dim = hidden * heads
        layers.append(dglnn.GATConv(dim, num_classes, 1, allow_zero_in_degree=True))
        super().__init__(layers, dropout)


class MLP(nn.Module):
    """Feature-only baseline: ignores the graph (shows how much structure matters)."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.0) -> None:
        super().__init__()
        dims = _dims(in_feats, hidden, num_classes, num_layers)
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in dims)
        self.dropout = nn.Dropout(dropout)

    def forward(self, graph_or_blocks, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP to the destination nodes' own features."""
        last = graph_or_blocks[-1] if isinstance(graph_or_blocks, (list, tuple)) else None
        h = x[: last.num_dst_nodes()] if last is not None else x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.dropout(torch.relu(h))
        return h
