"""Model-side helpers: which dgl.nn layers SAR supports, parameter sync, gradient all-reduce."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from dsgraph.errors import UserError

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
    import types

    from dsgraph.sar.attention import gat_forward
    check_model(model)
    for mod in model.modules():
        if type(mod).__name__ == "GATConv" and type(mod).__module__.startswith("dgl.nn"):
            mod.forward = types.MethodType(gat_forward, mod)
    return model


def broadcast_parameters(model: nn.Module) -> None:
    """Make every worker's parameters and buffers equal to rank 0's."""
    for t in model.state_dict().values():
        dist.broadcast(t, 0)


def allreduce_gradients(model: nn.Module) -> None:
    """Sum parameter gradients over workers (one flat all_reduce)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    off = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[off:off + n].view_as(p.grad))
        off += n


def global_sum(value: float | int, dtype: torch.dtype = torch.float64) -> float:
    """Sum of a scalar over all workers."""
    t = torch.tensor([value], dtype=dtype)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t.item()
