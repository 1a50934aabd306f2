"""The model contract of DS-MPNN training (``train.mode: dsmpnn``), declared once.

A DS-MPNN model is built as ``Model(in_feats=F, num_classes=C, edge_feats=E, **model.args)``
(``E``, the edge feature width, follows from the dataset) and called on one worker's subdomain as
``model(graph, x, efeat, exchange=fn)``: ``graph`` holds the worker's owned nodes first, then its
halo nodes, with every in-edge of an owned node; ``x`` has one row per node, ``efeat`` one per
edge. Whenever the model has updated node states that a neighbour's layer will read, it calls
``h = exchange(h)``, which overwrites the halo rows with their owners' current values (and
routes their gradients back in backward); ``exchange`` is None with one worker. Only the owned
rows of the output are used. Subclassing :class:`FieldModel` is optional: any module with this
constructor and a ``forward`` taking ``exchange`` works.
"""
from __future__ import annotations

import abc
import inspect
from typing import Callable, Optional

import torch
from torch import nn

Exchange = Callable[[torch.Tensor], torch.Tensor]


class FieldModel(nn.Module, abc.ABC):
    """Base of DS-MPNN models (see the module docstring for the contract)."""

    @abc.abstractmethod
    def forward(self, graph, x: torch.Tensor, efeat: torch.Tensor,
                exchange: Optional[Exchange] = None) -> torch.Tensor:
        """Node outputs of the subdomain; call ``exchange(h)`` after each layer that neighbours
        read."""


def follows_field_contract(model: nn.Module) -> bool:
    """Whether ``model.forward`` accepts the ``exchange`` hook of the DS-MPNN contract."""
    if isinstance(model, FieldModel):
        return True
    try:
        return "exchange" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
