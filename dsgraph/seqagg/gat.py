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


def gat_fused(conv, feat, attend: Attend, er: Optional[torch.Tensor] = None) -> torch.Tensor:
    """GATConv's forward (feature dropout, fc / fc_src+fc_dst, attention vectors, residual,
    bias, activation; same RNG use) with ``attend(ft_src, el, er, slope)`` doing the rest.

    ``feat`` is one tensor (sources are destinations: a full graph) or a (src, dst) pair;
    ``er``, if given for a pair, is used as the destination term instead of computing it
    (:func:`dst_term`; a caller that runs one layer over many groups of sources computes it once).
    """
    heads, out = conv._num_heads, conv._out_feats
    if isinstance(feat, tuple):
        h_src, h_dst = conv.feat_drop(feat[0]), conv.feat_drop(feat[1])
        fc_src = getattr(conv, "fc_src", conv.fc)
        ft = fc_src(h_src).view(*h_src.shape[:-1], heads, out)
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
    fc_dst = getattr(conv, "fc_dst", conv.fc)
    ft_dst = fc_dst(h_dst).view(*h_dst.shape[:-1], conv._num_heads, conv._out_feats)
    return (ft_dst * conv.attn_r).sum(dim=-1).unsqueeze(-1)


def fusable(conv) -> bool:
    """Whether the fused form computes exactly what DGL's forward would (no attention dropout
    in training, a non-negative LeakyReLU slope)."""
    return not (conv.training and conv.attn_drop.p > 0) and \
        isinstance(conv.leaky_relu, torch.nn.LeakyReLU) and conv.leaky_relu.negative_slope >= 0
