"""A layer on a RematBlock: checked, then run over every group as one autograd node."""
from __future__ import annotations

from typing import Any, Optional

import torch
from dgl.nn import GATConv
from torch import nn

from dsgraph.errors import UserError
from dsgraph.remat.backward import backward
from dsgraph.remat.block import RematBlock
from dsgraph.remat.run import Run
from dsgraph.seqagg import layers
from dsgraph.seqagg.gat import fusable


class _RematFn(torch.autograd.Function):
    """The layer over all groups as one autograd node (inputs: the layer's input, for a block
    without a row source; the destination rows the caller gave; the learnable tensors)."""

    @staticmethod
    def forward(ctx, run: Run, feat: Optional[torch.Tensor], dst_feat: Optional[torch.Tensor],
                *params: torch.Tensor):
        ctx.run = run
        return run.forward(for_backward=True)

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        run, ctx.run = ctx.run, None
        grads = backward(run, gout)
        return (None, *(rows.take_grad() if rows is not None else None
                        for rows in (run.input, run.dst_input)), *grads)


def remat_layer(conv: nn.Module, rb: RematBlock, feat: Any = None) -> torch.Tensor:
    """Layer ``conv`` on RematBlock ``rb`` (see :mod:`dsgraph.remat`); ``feat`` is the layer's
    input where ``rb`` has no row source (a later layer). A (source, destination) pair whose
    destination rows are real (not a zero-stride placeholder) gives the destination rows
    (a heterograph's relation, whose destination type has its own rows); its source part
    stands for rows the block's source pulls."""
    check_layer(conv)
    dst_feat = None
    if isinstance(feat, tuple) and rb.source is not None:
        if len(feat) != 2 or feat[1].dim() != 2 or feat[1].shape[0] != rb.num_dst:
            raise UserError(f"sampled.rematerialize: a layer given a (source, destination) pair "
                            f"needs {rb.num_dst} destination rows; got "
                            f"{[tuple(f.shape) for f in feat]}")
        if any(feat[1].stride()):  # a placeholder has stride 0: rows come from the source
            dst_feat = feat[1]
        feat = None
    if rb.source is None:
        shape = tuple(feat.shape) if isinstance(feat, torch.Tensor) else None
        if shape is None or len(shape) != 2 or shape[0] != rb.num_src:
            raise UserError(f"sampled.rematerialize: a later layer's input must be one tensor "
                            f"of {rb.num_src} rows (the block's sources); got "
                            f"{shape if shape is not None else type(feat).__name__}")
        rb.width, rb.dtype = int(feat.shape[1]), feat.dtype
    run = Run(conv, rb, feat if rb.source is None else None, dst_feat)
    learns = run.params or any(rows is not None and rows.grad
                               for rows in (run.input, run.dst_input))
    if not torch.is_grad_enabled() or not learns:
        with torch.no_grad():
            return run.forward()
    return _RematFn.apply(run, feat if run.input is not None else None, dst_feat, *run.params)


def check_layer(conv: nn.Module) -> None:
    """Raise a one-line UserError if ``conv`` cannot run rematerialized."""
    layers.check(conv, "sampled.rematerialize: the first layer", "cannot be rematerialized")
    name = type(conv).__name__
    # Layer-0 dropout would draw different masks in each group's run
    drop = getattr(conv, "feat_drop", None)
    if conv.training and isinstance(drop, nn.Dropout) and drop.p > 0:
        raise UserError(f"sampled.rematerialize: the first layer ({name}) has feat_drop "
                        f"{drop.p}; rematerialized groups would draw different masks (use 0)")
    if isinstance(conv, GATConv) and not fusable(conv):
        raise UserError("sampled.rematerialize: the first GATConv needs attn_drop 0 in "
                        "training and a non-negative LeakyReLU slope")
