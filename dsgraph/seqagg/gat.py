"""The one GATConv adapter: DGL 2.1's ``GATConv.forward`` with attention + aggregation fused.

Full-batch SAR (``dsgraph.sar.attention``) and sampled rematerialization
(``dsgraph.seqagg.sampled``) both run an unmodified ``dgl.nn.GATConv``'s parameters through
:func:`gat_fused`; they differ only in the ``attend`` callable that computes
``sum_j softmax_j(leaky_relu(el_j + er_i)) ft_j`` over their groups of source rows.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]


def gat_fused(conv, feat, attend: Attend, er: Optional[torch.Tensor] = None,
              project: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> torch.Tensor:
    """GATConv's forward (feature dropout, fc / fc_src+fc_dst, attention vectors, residual,
    bias, activation; same RNG use) with ``attend(ft_src, el, er, slope)`` doing the rest.

    ``feat`` is one tensor (sources are destinations: a full graph) or a (src, dst) pair;
    ``er``, if given for a pair, is used as the destination term instead of computing it
    (:func:`dst_term`; a caller that runs one layer over many groups of sources computes it once);
    ``project``, if given for a pair, stands in for ``fc_src`` on the source rows (sampled
    rematerialization passes a projection kept from forward, :func:`kept_projection`).
    """
    heads, out = conv._num_heads, conv._out_feats
    if isinstance(feat, tuple):
        h_src, h_dst = conv.feat_drop(feat[0]), conv.feat_drop(feat[1])
        fc_src = _fc(conv, "fc_src")
        ft = (project or fc_src)(h_src).view(*h_src.shape[:-1], heads, out)
        if er is None:
            er = dst_term(conv, h_dst)
    else:
        h_src = h_dst = conv.feat_drop(feat)
        ft = conv.fc(h_src).view(*h_src.shape[:-1], heads, out)
        er = (ft * conv.attn_r).sum(dim=-1).unsqueeze(-1)
    prefix = h_dst.shape[:-1]
    el = (ft * conv.attn_l).sum(dim=-1).unsqueeze(-1)
    rst = attend(ft, el, er, float(conv.leaky_relu.negative_slope))
    if conv.res_fc is not None:
        rst = rst + conv.res_fc(h_dst).view(*prefix, -1, out)
    if conv.has_explicit_bias:
        rst = rst + conv.bias.view(*((1,) * len(prefix)), heads, out)
    if conv.activation:
        rst = conv.activation(rst)
    return rst


def dst_term(conv, h_dst: torch.Tensor) -> torch.Tensor:
    """The attention's destination term ``er = <fc_dst(h_dst), attn_r>`` per head."""
    heads, out = conv._num_heads, conv._out_feats
    fc_dst = _fc(conv, "fc_dst")
    if _plain_linear(fc_dst):
        # <W_h x, a_h> = x . (W_h^T a_h): fold attn_r into the weight first, a heads x in_feats
        # map instead of the full projection (a sampled block's destinations are not among the
        # rows it projects anyway, so the full projection would be a matmul of its own)
        fold = (fc_dst.weight.view(heads, out, -1) * conv.attn_r.view(heads, out, 1)).sum(1)
        return (h_dst @ fold.t()).unsqueeze(-1)
    ft_dst = fc_dst(h_dst).view(*h_dst.shape[:-1], heads, out)
    return (ft_dst * conv.attn_r).sum(dim=-1).unsqueeze(-1)


def _fc(conv, side: str):
    """``fc_src`` / ``fc_dst`` of a GATConv built with (src, dst) widths, else its shared ``fc``
    (which such a layer does not have)."""
    return getattr(conv, side) if hasattr(conv, side) else conv.fc


def _plain_linear(m) -> bool:
    return type(m) is torch.nn.Linear and m.bias is None


class _KeptProjection(torch.autograd.Function):
    """``x @ weight.T`` whose value ``out`` was computed (or kept) earlier: returns ``out``,
    differentiates like the matmul."""

    @staticmethod
    def forward(ctx, x, weight, out):
        # kept on ctx, not save_for_backward: compression hooks would quantize them, and the
        # caller takes the gradient right away
        ctx.x, ctx.weight = x, weight
        return out.view_as(out)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.x, ctx.weight
        ctx.x = ctx.weight = None
        gx = g @ w if ctx.needs_input_grad[0] else None
        gw = g.t() @ x if ctx.needs_input_grad[1] else None
        return gx, gw, None


def projection_keepable(conv) -> bool:
    """Whether :func:`kept_projection` can stand in for the layer's ``fc_src``: it reproduces
    the gradient of a bias-free ``nn.Linear`` (DGL's)."""
    return _plain_linear(_fc(conv, "fc_src"))


def kept_projection(conv, ft: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """A stand-in for ``fc_src`` (see :func:`gat_fused`; needs :func:`projection_keepable`)
    that returns ``ft`` (the source rows' projection, rows x heads x out, kept from forward)
    and differentiates as ``fc_src``."""
    weight = _fc(conv, "fc_src").weight
    return lambda h: _KeptProjection.apply(h, weight, ft.reshape(ft.shape[0], -1))


def fusable(conv) -> bool:
    """Whether the fused form computes exactly what DGL's forward would (no attention dropout
    in training, a non-negative LeakyReLU slope)."""
    return not (conv.training and conv.attn_drop.p > 0) and \
        isinstance(conv.leaky_relu, torch.nn.LeakyReLU) and conv.leaky_relu.negative_slope >= 0
