"""GKN-style edge-conditioned message passing (DS-MPNN's model) built on ``dgl.nn.NNConv``.

encoder MLP (node inputs -> width) -> T kernel layers
h_i <- act(W h_i + mean_{j -> i} K(e_ji) h_j) with K an MLP from edge features to a width x width
matrix -> decoder MLP (width -> output channels). Memory note: NNConv materialises an
E x width x width weight tensor per layer, so width and the edge count bound CPU memory.
"""
from __future__ import annotations

from typing import Optional

import dgl.nn as dglnn
import torch
from torch import nn

from dsgraph.models.base import Exchange, FieldModel


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


class KernelMPNN(FieldModel):
    """Encoder, ``num_layers`` NNConv kernel layers (mean aggregation), decoder. ``layers`` is
    the older name of ``num_layers`` (the other built-in models' name), still accepted."""

    def __init__(self, in_feats: int, num_classes: int, edge_feats: int = 5, width: int = 16,
                 num_layers: int = 3, kernel_hidden: int = 32, shared: bool = False,
                 layers: Optional[int] = None) -> None:
        super().__init__()
        if layers is not None:
            if num_layers not in (3, layers):  # both given, and they disagree
                raise ValueError(f"layers ({layers}) and num_layers ({num_layers}) name the same "
                                 f"setting; give one")
            num_layers = layers
        layers = num_layers
        if width < 1 or layers < 1 or kernel_hidden < 1 or edge_feats < 1:
            raise ValueError("width, num_layers, kernel_hidden and edge_feats must be >= 1")
        self.width, self.num_layers, self.edge_feats = width, layers, edge_feats
        self.encoder = _mlp([in_feats, width * 2, width])

        def _conv() -> dglnn.NNConv:
            kernel = _mlp([edge_feats, kernel_hidden, kernel_hidden, width * width])
            return dglnn.NNConv(width, width, kernel, aggregator_type="mean", bias=True)

        # GKN shares one kernel over all hops; separate kernels per hop are the default here.
        n_convs = 1 if shared else layers
        self.convs = nn.ModuleList(_conv() for _ in range(n_convs))
        self.roots = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(n_convs))
        self.decoder = _mlp([width, width * 2, num_classes])

    def layer(self, i: int, graph, h: torch.Tensor, efeat: torch.Tensor) -> torch.Tensor:
        """Kernel layer ``i``: root term plus the mean of edge-conditioned messages."""
        k = i if len(self.convs) > 1 else 0
        out = self.convs[k](graph, h, efeat) + self.roots[k](h)
        return torch.nn.functional.gelu(out) if i < self.num_layers - 1 else out

    def forward(self, graph, x: torch.Tensor, efeat: Optional[torch.Tensor] = None,
                exchange: Optional[Exchange] = None) -> torch.Tensor:
        """Predict node outputs; ``exchange(h)`` refreshes halo rows between layers (DS-MPNN).

        ``efeat`` defaults to ``graph.edata["feat"]``. The encoder and decoder are pointwise, so
        halo rows only need refreshing after each kernel layer but the last.
        """
        if efeat is None:
            efeat = graph.edata["feat"]
        h = self.encoder(x)
        for i in range(self.num_layers):
            h = self.layer(i, graph, h, efeat)
            if exchange is not None and i < self.num_layers - 1:
                h = exchange(h)
        return self.decoder(h)
