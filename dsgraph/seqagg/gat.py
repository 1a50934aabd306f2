"""The one GATConv adapter: DGL 2.1's ``GATConv.forward`` with attention + aggregation fused.

Full-batch SAR (``dsgraph.sar.attention``) and sampled rematerialization
(``dsgraph.remat``) both run an unmodified ``dgl.nn.GATConv``'s parameters through
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
        fc_src = _fc(conv, "fc_src")
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


def projection_keepable(conv) -> bool:
    """Whether the layer's source side is ``ft = x @ W.T`` (``fc_src`` a bias-free
    ``nn.Linear``, DGL's), so :func:`source_projection` and :func:`source_grads` can stand in
    for running it under autograd."""
    return _plain_linear(_fc(conv, "fc_src"))


def source_weight(conv) -> torch.Tensor:
    """The weight of the layer's source projection (``fc_src``, or the shared ``fc``)."""
    return _fc(conv, "fc_src").weight


def source_projection(conv, x: torch.Tensor) -> torch.Tensor:
    """``fc_src(x)`` as rows x heads x out, without autograd (needs :func:`projection_keepable`;
    the same op as the layer's forward, so the same rounding)."""
    ft = torch.nn.functional.linear(x.detach(), source_weight(conv).detach())
    return ft.view(x.shape[0], conv._num_heads, conv._out_feats)


def source_grads(conv, x: torch.Tensor, g_ft: torch.Tensor, g_el: torch.Tensor,
                 need_x: bool) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Gradients of ``fc_src.weight``, ``attn_l`` and (``need_x``) of the rows ``x`` from those
    of the source side's outputs ``ft = fc_src(x)`` (rows x heads x out) and
    ``el = <ft, attn_l>`` (rows x heads x 1), as autograd would give them (needs
    :func:`projection_keepable`). ``g_ft`` is overwritten.

    ``ft`` itself is not needed: ``attn_l``'s gradient ``sum_j g_el_jh ft_jh`` is
    ``W_h (x^T g_el)_h``, a heads-wide product of the rows, so a caller that kept the
    projection INT2 from forward never decodes it for this.
    """
    heads, out = conv._num_heads, conv._out_feats
    w = source_weight(conv).detach()
    x = x.detach()
    g = g_ft.add_(g_el * conv.attn_l.detach()).view(x.shape[0], heads * out)
    g_w = g.t() @ x
    # heads x in_feats (this order: with the rows' matrix transposed instead, a tall-skinny
    # product, it took 10x as long)
    gx_el = g_el.reshape(x.shape[0], heads).t() @ x
    # W_h @ (x^T g_el)_h per head (a batched matrix-vector product: 4x slower as torch.bmm)
    g_attn = (w.view(heads, out, -1) * gx_el.unsqueeze(1)).sum(-1).view(1, heads, out)
    return g_w, g_attn, (g @ w if need_x else None)


def fusable(conv) -> bool:
    """Whether the fused form computes exactly what DGL's forward would (no attention dropout
    in training, a non-negative LeakyReLU slope)."""
    return not (conv.training and conv.attn_drop.p > 0) and \
        isinstance(conv.leaky_relu, torch.nn.LeakyReLU) and conv.leaky_relu.negative_slope >= 0
