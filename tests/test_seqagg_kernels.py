"""The sequential-aggregation core's sum fold equals one DGL aggregation over all edges, on both
of its paths: in-place sparse ``addmm_`` (wide rows: chunks with few edges per destination, and
every chunk once the state exists) and DGL's ``gspmm`` into a partial result (a dense first
chunk, and every chunk of narrow rows); repeated edges and rows without edges included.

GAT's chunked attention (fold, finish, gradients) equals DGL's ``edge_softmax`` aggregation and
its autograd gradients, with logits spread wide enough that the softmax shift must move; in
float32 its fused C kernels (``dsgraph.seqagg.native``) give what its torch path gives."""
from __future__ import annotations

import os
import shutil

import dgl
import pytest
import torch

from dsgraph.seqagg import kernels, native
from dsgraph.seqagg.chunks import GroupGraph, sort_by_src


def _group(num_src: int, num_dst: int, num_edges: int, seed: int, row: tuple = (16, 16)):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = torch.randint(0, num_dst, (num_edges,), generator=gen)
    src[: num_edges // 10], dst[: num_edges // 10] = src[-(num_edges // 10):], dst[-(num_edges // 10):]
    s, d, _ = sort_by_src(src, dst)
    return s, d, torch.randn(num_src, *row, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("num_dst,num_edges,chunk_rows", [
    (50, 40, 8),     # ~0.1 edges per destination per chunk: every chunk in place (width 256)
    (5, 400, 0),     # 80 per destination: gspmm into a partial
    (20, 200, 16),   # chunks on either side of the threshold
])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("row", [(16, 16), (2, 4)], ids=["wide", "narrow"])
def test_sum_fold_equals_one_aggregation(num_dst, num_edges, chunk_rows, reduce, row):
    s, d, u = _group(64, num_dst, num_edges, seed=num_edges, row=row)
    gg = GroupGraph(s, d, 64, num_dst)
    edges = [gg.edge_range(a, b) for a, b in gg.bounds(chunk_rows)]
    sparse = [eb - ea for ea, eb in edges if eb - ea < kernels.SPARSE_CHUNK * num_dst]
    assert 16 * 16 >= kernels.SPARSE_WIDTH  # rows wide enough for the in-place path
    state = kernels.SpmmState(reduce)
    kernels.spmm_fold(state, gg, "copy_lhs", u, None, chunk_rows)
    deg = torch.bincount(d, minlength=num_dst)
    got = kernels.spmm_finish(state, num_dst, row, deg, u.dtype)
    block = dgl.create_block((s, d), num_src_nodes=64, num_dst_nodes=num_dst)
    ref = dgl.ops.gspmm(block, "copy_lhs", reduce, u, None)
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-12)
    if row != (16, 16):
        return
    if (num_dst, num_edges) == (50, 40):
        assert sparse, "the in-place path was not taken"
    if (num_dst, num_edges) == (5, 400):
        assert not sparse, "the partial-result path was not taken"


@pytest.mark.parametrize("spread", [1.0, 60.0], ids=["narrow-logits", "shift-moves"])
@pytest.mark.parametrize("chunk_rows", [0, 7])
def test_attention_fold_and_grads_equal_dgl(spread, chunk_rows):
    """Destinations without edges get 0 (as DGL); with logits 60 apart, later chunks raise
    destinations' softmax shift by more than ``SHIFT_SLACK`` (the rescaling branch)."""
    num_src, num_dst, heads, width, slope = 40, 12, 3, 5, 0.2
    s, d, _ = _group(num_src, num_dst, 150, seed=7)
    keep = d < num_dst - 2  # the last two destinations get no edge
    s, d = s[keep], d[keep]
    gen = torch.Generator().manual_seed(1)
    ft = torch.randn(num_src, heads, width, generator=gen, dtype=torch.float64)
    # growing with the row, so later chunks hold the larger logits
    el = (torch.rand(num_src, heads, 1, generator=gen, dtype=torch.float64)
          + torch.arange(num_src, dtype=torch.float64).view(-1, 1, 1) / num_src) * spread
    er = torch.randn(num_dst, heads, 1, generator=gen, dtype=torch.float64)
    gg = GroupGraph(s, d, num_src, num_dst)
    st = kernels.SoftmaxState(num_dst, heads, ft)
    kernels.attention_fold(st, gg, ft, el, er, slope, chunk_rows)
    got = kernels.attention_finish(st, num_dst, (heads, width), ft)

    block = dgl.create_block((s, d), num_src_nodes=num_src, num_dst_nodes=num_dst)
    leaves = [t.clone().requires_grad_(True) for t in (ft, el, er)]
    e = torch.nn.functional.leaky_relu(dgl.ops.gsddmm(block, "add", leaves[1], leaves[2],
                                                      "u", "v"), slope)
    ref = dgl.ops.gspmm(block, "mul", "sum", leaves[0], dgl.ops.edge_softmax(block, e))
    assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12)
    assert bool((got[-2:] == 0).all())

    gout = torch.randn(num_dst, heads, width, generator=gen, dtype=torch.float64)
    want = torch.autograd.grad(ref, leaves, gout)
    dsum = (gout * got).sum(-1, keepdim=True)
    grad_er = torch.zeros_like(er)
    gft, gel = kernels.attention_grads(gg, ft, el, er, st.m, st.den, gout, dsum, slope,
                                       chunk_rows, grad_er)
    for name, g, w in (("ft", gft, want[0]), ("el", gel, want[1]), ("er", grad_er, want[2])):
        assert torch.allclose(g, w, rtol=1e-9, atol=1e-12), name


def _attention_pass(gg, ft, el, er, gout, slope, chunk_rows):
    """fold + finish, the softmax term with its per-edge dots, and the gradients (float32)."""
    num_dst, heads = gg.num_dst, el.shape[1]
    st = kernels.SoftmaxState(num_dst, heads, ft)
    kernels.attention_fold(st, gg, ft, el, er, slope, chunk_rows)
    out = kernels.attention_finish(st, num_dst, tuple(ft.shape[1:]), ft)
    dsum, dots = torch.zeros(num_dst, heads, 1, dtype=ft.dtype), []
    kernels.attention_dsum(dsum, gg, ft, el, er, st.m, st.den, gout, slope, chunk_rows, dots=dots)
    grad_er = torch.zeros_like(er)
    gft, gel = kernels.attention_grads(gg, ft, el, er, st.m, st.den, gout, dsum, slope,
                                       chunk_rows, grad_er, dots=dots)
    # without stored dots (full-batch SAR) the gradient pass computes them itself
    again = kernels.attention_grads(gg, ft, el, er, st.m, st.den, gout, dsum, slope,
                                    chunk_rows, torch.zeros_like(er))
    return {"out": out, "dsum": dsum, "ft": gft, "el": gel, "er": grad_er,
            "ft_again": again[0], "el_again": again[1]}


@pytest.mark.parametrize("chunk_rows", [0, 7])
def test_attention_c_kernels_equal_torch_path(chunk_rows):
    """The fused per-edge dots, weighted scatter and weighted gather (float32) against the
    torch path on the same group, and both against the float64 computation; repeated edges and
    destinations without edges included."""
    if not native.available():
        # with a compiler the kernels must build (a failed build would silently cost speed),
        # unless switched off
        assert shutil.which("gcc") is None or os.environ.get("DSGRAPH_NATIVE") == "0", \
            native.failure()
        pytest.skip(f"C kernels unavailable: {native.failure()}")
    num_src, num_dst, heads, width, slope = 40, 12, 3, 20, 0.2
    s, d, _ = _group(num_src, num_dst, 150, seed=3)
    keep = d < num_dst - 2
    s, d = s[keep], d[keep]
    gen = torch.Generator().manual_seed(2)
    t64 = {"ft": torch.randn(num_src, heads, width, generator=gen, dtype=torch.float64),
           "el": torch.randn(num_src, heads, 1, generator=gen, dtype=torch.float64) * 3,
           "er": torch.randn(num_dst, heads, 1, generator=gen, dtype=torch.float64),
           "gout": torch.randn(num_dst, heads, width, generator=gen, dtype=torch.float64)}
    t32 = {k: v.float() for k, v in t64.items()}
    gg = GroupGraph(s, d, num_src, num_dst)
    assert native.usable(t32["ft"], t32["gout"])
    fused = _attention_pass(gg, **t32, slope=slope, chunk_rows=chunk_rows)
    with native.disabled():
        assert not native.usable(t32["ft"])
        plain = _attention_pass(gg, **t32, slope=slope, chunk_rows=chunk_rows)
    exact = _attention_pass(gg, **t64, slope=slope, chunk_rows=chunk_rows)
    for k, ref in exact.items():
        scale = ref.abs().max().item()
        assert scale > 0, k
        assert (fused[k].double() - plain[k].double()).abs().max().item() <= 1e-5 * scale, k
        assert (fused[k].double() - ref).abs().max().item() <= 1e-5 * scale, k
    assert bool((fused["out"][-2:] == 0).all())  # destinations without edges
