"""Letting a model's layers take a RematBlock: the replacement forward and :func:`install`."""
from __future__ import annotations

from typing import Any, Callable

import torch
from dgl.nn import GATConv, GraphConv, SAGEConv
from torch import nn

from dsgraph.errors import UserError
from dsgraph.remat.block import RematBlock
from dsgraph.remat.layer import remat_layer
from dsgraph.seqagg import layers


def remat_forward(conv: nn.Module, prev: Callable[..., Any], graph: Any, feat: Any,
                  *args: Any, **kwargs: Any) -> torch.Tensor:
    """The forward :func:`install` gives a layer: rematerialized on a RematBlock, ``prev`` (its
    forward before) on anything else."""
    if not isinstance(graph, RematBlock):
        return prev(graph, feat, *args, **kwargs)
    if args or kwargs:
        raise UserError("sampled.rematerialize: the first layer was called with edge weights "
                        "or extra arguments")
    return remat_layer(conv, graph, feat)


# The forwards rematerialization puts on a model's layers (dsgraph.seqagg.layers.patch).
FORWARDS: layers.Forwards = ((SAGEConv, remat_forward), (GraphConv, remat_forward),
                             (GATConv, remat_forward))


def install(model: nn.Module) -> nn.Module:
    """Let the model's SAGEConv/GraphConv/GATConv layers take a RematBlock (they run
    rematerialized on one, as before on anything else; :data:`FORWARDS`). Returns ``model``,
    changed in place."""
    return layers.patch(model, "remat", FORWARDS)
