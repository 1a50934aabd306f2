"""Which dgl.nn layers SAR runs, and routing GATConv through the fused SAR attention."""
from __future__ import annotations

import types

from dgl.nn import GATConv
from torch import nn

from dsgraph.errors import UserError
from dsgraph.sar.attention import gat_forward

SUPPORTED = "GraphConv, SAGEConv (aggregator mean, gcn or pool), GATConv"
_SAGE_AGGREGATORS = ("mean", "gcn", "pool")


def check_model(model: nn.Module) -> None:
    """Raise a one-line UserError naming the first dgl.nn layer SAR cannot run."""
    for name, mod in model.named_modules():
        cls = type(mod)
        where = cls.__module__
        if not where.startswith("dgl.nn") or where.startswith("dgl.nn.pytorch.utils"):
            continue
        ok = cls.__name__ in ("GraphConv", "GATConv") or (
            cls.__name__ == "SAGEConv" and getattr(mod, "_aggre_type", None) in _SAGE_AGGREGATORS)
        if not ok:
            extra = f" (aggregator {mod._aggre_type!r})" if cls.__name__ == "SAGEConv" else ""
            raise UserError(f"model layer {name or '<root>'!r} is {where}.{cls.__name__}{extra}, "
                            f"which SAR full-batch training does not support; supported: "
                            f"{SUPPORTED}")


def prepare_model(model: nn.Module) -> nn.Module:
    """Check the layers (:func:`check_model`) and route every GATConv through the fused SAR
    attention (``dsgraph.sar.attention.gat_forward``, which defers to DGL's own forward off a
    SAR graph or outside ``sar`` mode). Returns ``model``, changed in place."""
    check_model(model)
    for mod in model.modules():
        if isinstance(mod, GATConv):
            mod.forward = types.MethodType(gat_forward, mod)
    return model
