"""The GATConv adapter's shortcuts compute what DGL's GATConv computes: the fused forward, the
destination term with ``attn_r`` folded into the weight, and the source side's gradients taken
explicitly (``source_grads``: same gradients of ``fc_src``'s weight, ``attn_l`` and the source
rows as autograd gives), in float64."""
from __future__ import annotations

import dgl
import pytest
import torch
from dgl.nn import GATConv

from dsgraph.seqagg import gat


def _block(num_src: int, num_dst: int, num_edges: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = torch.randint(0, num_dst, (num_edges,), generator=gen)
    dst[:num_dst] = torch.arange(num_dst)  # every destination has an in-edge
    return dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=num_dst)


def _attend(block):
    """The attention + aggregation of DGL's GATConv, for ``gat_fused``."""
    def attend(ft, el, er, slope):
        e = torch.nn.functional.leaky_relu(dgl.ops.gsddmm(block, "add", el, er, "u", "v"), slope)
        a = dgl.ops.edge_softmax(block, e)
        return dgl.ops.gspmm(block, "mul", "sum", ft, a)
    return attend


@pytest.mark.parametrize("in_feats", [12, (12, 7)], ids=["shared-fc", "fc_src-fc_dst"])
def test_fused_forward_dst_term_and_source_grads_equal_dgl(in_feats):
    torch.manual_seed(0)
    conv = GATConv(in_feats, 5, num_heads=3, allow_zero_in_degree=True).double()
    block = _block(30, 9, 80, 1)
    w_src = in_feats if isinstance(in_feats, int) else in_feats[0]
    w_dst = in_feats if isinstance(in_feats, int) else in_feats[1]
    x_src = torch.randn(30, w_src, dtype=torch.float64, requires_grad=True)
    x_dst = torch.randn(9, w_dst, dtype=torch.float64, requires_grad=True)
    params = list(conv.parameters()) + [x_src, x_dst]

    def grads(out):
        g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(5))
        return torch.autograd.grad(out, params, g, allow_unused=True)

    ref = conv(block, (x_src, x_dst))
    ref_grads = grads(ref)
    out = gat.gat_fused(conv, (x_src, x_dst), _attend(block))
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads(out), ref_grads):
        assert (got is None) == (want is None)
        if got is not None:
            assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    # the folded destination term against the projected one
    ft_dst = (conv.fc_dst if hasattr(conv, "fc_dst") else conv.fc)(x_dst).view(9, 3, 5)
    want_er = (ft_dst * conv.attn_r).sum(-1, keepdim=True)
    assert torch.allclose(gat.dst_term(conv, x_dst), want_er, rtol=1e-12, atol=1e-12)

    # the source side's gradients, given those of ft and el, against autograd's
    assert gat.projection_keepable(conv)
    fc_src = conv.fc_src if hasattr(conv, "fc_src") else conv.fc
    ft = fc_src(x_src).view(30, 3, 5)
    el = (ft * conv.attn_l).sum(-1, keepdim=True)
    assert torch.equal(gat.source_projection(conv, x_src), ft.detach())
    gen = torch.Generator().manual_seed(6)
    g_ft = torch.randn(ft.shape, dtype=ft.dtype, generator=gen)
    g_el = torch.randn(el.shape, dtype=el.dtype, generator=gen)
    want = torch.autograd.grad([ft, el], [fc_src.weight, conv.attn_l, x_src], [g_ft, g_el])
    got = gat.source_grads(conv, x_src, g_ft.clone(), g_el, need_x=True)
    for name, a, b in zip(("weight", "attn_l", "x"), got, want):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-10, atol=1e-12), name
    assert gat.source_grads(conv, x_src, g_ft.clone(), g_el, need_x=False)[2] is None


def test_projection_with_a_bias_is_not_kept():
    conv = GATConv(6, 4, num_heads=2)
    conv.fc = torch.nn.Linear(6, 8, bias=True)
    assert not gat.projection_keepable(conv)
    x = torch.randn(5, 6)
    want = (conv.fc(x).view(5, 2, 4) * conv.attn_r).sum(-1, keepdim=True)
    assert torch.allclose(gat.dst_term(conv, x), want, atol=1e-6)  # projects, bias included
