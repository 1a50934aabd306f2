"""Which dgl.nn layers SAR runs, and routing GATConv through the fused SAR attention."""
from __future__ import annotations

from dgl.nn import GATConv
from torch import nn

from dsgraph.sar.attention import gat_forward
from dsgraph.seqagg import layers

# The forwards SAR puts on a model's layers (dsgraph.seqagg.layers.patch).
FORWARDS: layers.Forwards = ((GATConv, gat_forward),)


def check_model(model: nn.Module) -> None:
    """Raise a one-line UserError naming the first dgl.nn layer SAR cannot run."""
    for name, mod in model.named_modules():
        if layers.is_graph_layer(mod):
            layers.check(mod, f"model layer {name or '<root>'!r}",
                         "SAR full-batch training does not support")


def prepare_model(model: nn.Module) -> nn.Module:
    """Check the layers (:func:`check_model`) and route every GATConv through the fused SAR
    attention (``dsgraph.sar.attention.gat_forward``, which defers to DGL's own forward off a
    SAR graph or outside ``sar`` mode; :data:`FORWARDS`). Returns ``model``, changed in
    place."""
    check_model(model)
    return layers.patch(model, "sar", FORWARDS)
