"""Stacked message-passing classifiers (GraphSAGE, GCN, GAT) built from ``dgl.nn`` layers.

Contract shared by every model dsgraph trains (docs/models.md):
``Model(in_feats, num_classes, **model.args)``; ``forward(blocks, x)`` with one block per layer
in sampled mode, or ``forward(graph, x)`` with the same graph for every layer in full-graph mode.
Built-in models also offer ``forward_layer(i, graph, h)`` so evaluation can run layer by layer
over all neighbours.

Embeddings (``python -m predict --embeddings``): a node's embedding is the input of the model's
output layer, ``model.layers[-1]`` (``layers`` an ``nn.ModuleList`` or ``nn.Sequential``, as in
every built-in model and most ``dgl.nn`` examples), i.e. the last hidden layer after its
activation. It is read with a forward pre-hook (:func:`capture_layer_input`), so a model needs
no extra method; a model without ``layers`` cannot export embeddings (:func:`output_layer`
says so in one line).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Sequence

import dgl
import dgl.nn as dglnn
import torch
from torch import nn

from dsgraph.errors import ConfigError
from dsgraph.models.inputs import InputRows, materialized
from dsgraph.models.order import aggregate_first, aggregate_first_is_cheaper


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

    # forward takes InputRows (dsgraph.models.inputs): its layers that can aggregate them in
    # place do (LeanSAGEConv), the others get the materialized tensor.
    takes_input_rows = True

    def forward_layer(self, i: int, graph, h: torch.Tensor) -> torch.Tensor:
        """Apply layer ``i`` (with activation and dropout unless it is the last one)."""
        layer = self.layers[i]
        if not isinstance(layer, LeanSAGEConv):
            h = materialized(h)
        h = self._post(layer(graph, h))
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
    """GraphSAGE with ``dgl.nn.SAGEConv`` layers (:class:`LeanSAGEConv`; aggregator mean, pool,
    gcn or lstm)."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 aggregator: str = "mean", dropout: float = 0.0) -> None:
        super().__init__([LeanSAGEConv(i, o, aggregator)
                          for i, o in _dims(in_feats, hidden, num_classes, num_layers)], dropout)


class GCN(StackedGNN):
    """GCN with ``dgl.nn.GraphConv`` layers (:class:`LeanGraphConv`: symmetric normalisation,
    zero in-degree allowed)."""

    def __init__(self, in_feats: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 norm: str = "both", dropout: float = 0.0) -> None:
        super().__init__([LeanGraphConv(i, o, norm=norm, allow_zero_in_degree=True)
                          for i, o in _dims(in_feats, hidden, num_classes, num_layers)], dropout)


class LeanSAGEConv(dglnn.SAGEConv):
    """``dgl.nn.SAGEConv`` that aggregates before its linear map whenever that takes fewer
    multiply-adds on the graph at hand (:mod:`dsgraph.models.order`), not only when
    ``in_feats <= out_feats``: on a sampled block it maps the destinations instead of every
    source row. Same parameters and state-dict names, same function (tests/test_layer_order.py
    checks outputs and every gradient against DGL's layer)."""

    def forward(self, graph, feat, edge_weight=None):
        """As ``SAGEConv.forward``, in the cheaper order for mean and gcn aggregation; from
        :class:`~dsgraph.models.inputs.InputRows`, aggregated where the rows are stored when it
        aggregates first."""
        first = (self._aggre_type in ("mean", "gcn") and isinstance(graph, dgl.DGLGraph)
                 and (self._in_src_feats <= self._out_feats
                      or aggregate_first_is_cheaper(graph.num_src_nodes(), graph.num_dst_nodes(),
                                                    graph.num_edges(), self._in_src_feats,
                                                    self._out_feats)))
        if isinstance(feat, InputRows):
            if first and edge_weight is None and graph.is_block and \
                    (self.feat_drop.p == 0 or not self.training):
                return self._from_input_rows(graph, feat)
            feat = feat.materialize()
        with aggregate_first(self, first and self._in_src_feats > self._out_feats):
            return super().forward(graph, feat, edge_weight)

    def _from_input_rows(self, block, rows: InputRows) -> torch.Tensor:
        """SAGEConv's aggregate-first forward (mean or gcn) on a block whose source rows are
        summed where they are stored: only the destinations' rows are gathered."""
        h_self = rows.rows(torch.arange(block.num_dst_nodes()))
        summed = rows.aggregate_sum(block)
        degs = block.in_degrees().to(summed).unsqueeze(-1)
        if self._aggre_type == "mean":
            rst = self.fc_self(h_self) + self.fc_neigh(summed / degs.clamp(min=1))
        else:  # gcn: the destination counts as one of its own neighbours
            rst = self.fc_neigh((summed + h_self) / (degs + 1))
            if self.bias is not None:
                rst = rst + self.bias
        if self.activation is not None:
            rst = self.activation(rst)
        if self.norm is not None:
            rst = self.norm(rst)
        return rst


# A block's sources' out-degrees in the whole graph, where exact inference provides them
# (:func:`dsgraph.distgraph.evaluate.layerwise_outputs`). A block's own out-degrees count only
# the edges into its destinations, so with them a node's output would depend on which nodes
# share its batch; training on sampled blocks keeps the block's own, as DGL's GraphConv does.
SRC_OUT_DEGREES = "_src_out_degrees"


class LeanGraphConv(dglnn.GraphConv):
    """``dgl.nn.GraphConv`` whose forward on DGL graphs and blocks holds fewer node-sized
    tensors at once.

    GraphConv keeps its degree-scaled input in ``srcdata`` and its aggregate in ``dstdata``
    until it returns, so at its output scaling five node-sized tensors are alive (the input,
    both of those, the product and the scaled output). The same steps as one chain of
    temporaries free each one as the next exists: three are alive at most, plus what autograd
    saves (with INT2-compressed saves, that forward transient is a GCN step's peak:
    the compression benchmark). Same parameters, same result to rounding
    (tests/test_models.py). A (src, dst) pair, as ``HeteroGraphConv`` passes each relation,
    takes the same path (GraphConv reads only the sources). Other graph views (full-batch SAR,
    rematerialized blocks) and calls with edge weights run GraphConv's own forward.
    """

    def forward(self, graph, feat, weight=None, edge_weight=None):
        """As ``GraphConv.forward``; the lean path for a DGL graph and one feature tensor or a
        (src, dst) pair (its sources' out-degrees from ``srcdata[SRC_OUT_DEGREES]`` when the
        graph carries them)."""
        src = feat[0] if isinstance(feat, (tuple, list)) and len(feat) == 2 else feat
        if not isinstance(graph, dgl.DGLGraph) or not isinstance(src, torch.Tensor) \
                or weight is not None or edge_weight is not None \
                or not self._allow_zero_in_degree:
            return super().forward(graph, feat, weight, edge_weight)
        h = src
        if self._norm in ("left", "both"):
            degrees = graph.srcdata[SRC_OUT_DEGREES] if SRC_OUT_DEGREES in graph.srcdata \
                else graph.out_degrees()
            h = h * _degree_factor(degrees, self._norm, h)
        if self.weight is not None and not aggregate_first_is_cheaper(
                graph.num_src_nodes(), graph.num_dst_nodes(), graph.num_edges(),
                self._in_feats, self._out_feats):
            h = dgl.ops.copy_u_sum(graph, h @ self.weight)
        else:
            h = dgl.ops.copy_u_sum(graph, h)
            if self.weight is not None:
                h = h @ self.weight
        if self._norm in ("right", "both"):
            h = h * _degree_factor(graph.in_degrees(), self._norm, h)
        if self.bias is not None:
            h = h + self.bias
        return self._activation(h) if self._activation is not None else h


def _degree_factor(degrees: torch.Tensor, norm: str, like: torch.Tensor) -> torch.Tensor:
    """GraphConv's per-node factor, shaped to broadcast over ``like``'s rows: degree^-1/2 for
    ``'both'``, else 1/degree (degrees clamped to >= 1)."""
    d = degrees.to(like).clamp(min=1)
    d = d.pow(-0.5) if norm == "both" else d.reciprocal()
    return d.view((-1,) + (1,) * (like.dim() - 1))


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


def layer_count(model: nn.Module) -> Optional[int]:
    """Message-passing layers of ``model`` (blocks it consumes in sampled mode): its
    ``num_layers``, else None (unknown: a plug-in model, or one that ignores the graph)."""
    n = getattr(model, "num_layers", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def output_layer(model: nn.Module) -> nn.Module:
    """The model's output layer, ``model.layers[-1]``, whose input is the node embedding."""
    layers = getattr(model, "layers", None)
    if isinstance(layers, (nn.ModuleList, nn.Sequential)) and len(layers) > 0:
        return layers[-1]
    raise ConfigError(f"model.name: {type(model).__name__} has no `layers` (an nn.ModuleList "
                      f"whose last entry is the output layer), so its last hidden layer is "
                      f"unknown and --embeddings cannot export it")


def _node_input(args: tuple[Any, ...]) -> torch.Tensor:
    """The node-feature argument of a layer call: the first tensor, or a ``(src, dst)`` pair's
    destination rows (how dgl.nn layers take bipartite input)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, tuple) and len(a) == 2 and all(isinstance(t, torch.Tensor) for t in a):
            return a[1]
    raise ConfigError("model.layers[-1] was called without a node-feature tensor; cannot "
                      "read its input as the embedding")


@contextlib.contextmanager
def capture_layer_input(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, append the input of :func:`output_layer` (detached) to the yielded
    list at every forward call. With blocks, its first ``num_dst_nodes`` rows are the output
    nodes'."""
    captured: list[torch.Tensor] = []
    handle = output_layer(model).register_forward_pre_hook(
        lambda module, args: captured.append(_node_input(args).detach()))
    try:
        yield captured
    finally:
        handle.remove()
