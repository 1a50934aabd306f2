"""A layer on a RematBlock: checked, then run over every group as one autograd node."""
from __future__ import annotations

from typing import Optional

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
    without a row source, and the learnable tensors)."""

    @staticmethod
    def forward(ctx, run: Run, feat: Optional[torch.Tensor], *params: torch.Tensor):
        ctx.run = run
        return run.forward(for_backward=True)

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        run, ctx.run = ctx.run, None
        grads = backward(run, gout)
        return (None, run.input.take_grad() if run.input is not None else None, *grads)


def remat_layer(conv: nn.Module, rb: RematBlock,
                feat: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Layer ``conv`` on RematBlock ``rb`` (see :mod:`dsgraph.remat`); ``feat`` is the layer's
    input where ``rb`` has no row source (a later layer)."""
    check_layer(conv)
    if rb.source is None:
        if feat is None or feat.dim() != 2 or feat.shape[0] != rb.num_src:
            raise UserError(f"sampled.rematerialize: a later layer's input must be one tensor "
                            f"of {rb.num_src} rows (the block's sources); got "
                            f"{None if feat is None else tuple(feat.shape)}")
        rb.width, rb.dtype = int(feat.shape[1]), feat.dtype
    run = Run(conv, rb, feat if rb.source is None else None)
    learns = run.params or (run.input is not None and run.input.grad)
    if not torch.is_grad_enabled() or not learns:
        with torch.no_grad():
            return run.forward()
    return _RematFn.apply(run, feat if run.input is not None else None, *run.params)


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
