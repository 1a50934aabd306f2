"""Backward of a rematerialized layer call: the output runs again under autograd give the
aggregate's gradient, then one strategy per kind of layer.

* Stored features under a linear aggregation (nothing aggregated needs a gradient): done, no
  source row is pulled again.
* sum/mean/max/min: each group pulled and recomputed under autograd (with ``compression``
  hooks if enabled), its gradient from the core: the reversed edges for sum/mean, the chunks
  that won for max/min.
* GAT: the fused attention's gradients with the softmax term ``D_i = <g_i, out_i>`` read off
  the aggregate (no extra pass). A plain source projection (DGL's ``fc_src``) is not rerun
  under autograd: its gradients come from the attention's by
  :func:`~dsgraph.seqagg.gat.source_grads`, with the rows pulled for the weight gradient. With
  ``compression`` GAT keeps each group's projection INT2 and its logits' source term exact
  from forward, and takes ``D`` in one more pass (:func:`_gat_dsum`). Where the output map
  adds only a bias, the aggregate's gradient is the incoming gradient itself, not a copy.
"""
from __future__ import annotations

from typing import Optional

import torch

from dsgraph.remat.block import Group
from dsgraph.remat.run import Phase, Run
from dsgraph.remat.store import Kept
from dsgraph.seqagg import kernels
from dsgraph.seqagg.gat import dst_term, projection_keepable, source_grads, source_projection, \
    source_weight


def backward(run: Run, gout: torch.Tensor) -> list[Optional[torch.Tensor]]:
    """Gradients of ``run.params`` (the input's, if any, gathered in ``run.input``) from the
    output's gradient ``gout``."""
    rb, params = run.rb, run.params
    grads: list[Optional[torch.Tensor]] = [None] * len(params)
    for rows in (run.input, run.dst_input):
        if rows is not None:
            rows.start_backward()

    kept, run.kept = run.kept, None
    # the aggregate's gradient is needed only where backward revisits the groups. GAT's is
    # the output's own gradient where the output map adds only a bias (DGL's default): then
    # ``gout`` serves as it, and no second destination-sized gradient is allocated.
    g_agg, dsum = None, None
    if run.is_gat:
        gout = gout.contiguous()
        dsum = torch.zeros(kept.shape[0], *kept.shape[1:-1], 1, dtype=kept.dtype)
    elif run.src_grad:
        g_agg = kept.new_zeros()
    run.mode = Phase.EMIT
    for i, (a, b) in enumerate(run.dst_chunks()):  # the output runs again, under autograd
        agg = kept.chunk(i)
        run.emitted = agg.detach().requires_grad_(True)
        with torch.enable_grad():
            out = run.call(None, run.dst_rows(a, b), (a, b))
            got = run.grad(out, params + [run.emitted], gout[a:b])
        accumulate(grads, got[:-1])
        g = got[-1]
        if run.is_gat:
            g = torch.zeros_like(agg) if g is None else g
            if g_agg is not None or not torch.equal(g, gout[a:b]):
                if g_agg is None:  # the first chunk whose gradient is not gout's
                    g_agg = torch.zeros_like(gout)
                    g_agg[:a] = gout[:a]
                g_agg[a:b] = g
            if run.el_kept is None:
                # The softmax term D_i = sum_j a_ij <g_i, ft_j> = <g_i, sum_j a_ij ft_j>
                # is the gradient's dot with the aggregate: no pass over the groups
                # computes it (with compression, :func:`_gat_dsum` does).
                dsum[a:b] = (g * agg).sum(-1, keepdim=True)
        elif g is not None and g_agg is not None:
            g_agg[a:b] = g
        del out, got, agg, g
    run.emitted, run.captured = None, ()
    if run.is_gat:
        accumulate(grads, _gat_backward(run, gout if g_agg is None else g_agg, dsum))
    elif run.src_grad and rb.groups:
        _spmm_backward(run, g_agg, grads)
    return grads


def _spmm_backward(run: Run, g_agg: torch.Tensor, grads: list) -> None:
    """Add a sum/mean/max/min aggregation's gradients to ``grads``: each group recomputed under
    autograd."""
    run.mode = Phase.PARTIAL
    for group in run.rb.groups:
        with torch.enable_grad(), run.compress():
            run.call(group, run.dst_stub())
            (u,) = run.captured
            run.captured = ()
            gu = _spmm_grad(run, group, u, g_agg)
            accumulate(grads, run.grad(u, run.params, gu))
        del u, gu


def _spmm_grad(run: Run, group: Group, u: torch.Tensor, g_agg: torch.Tensor) -> torch.Tensor:
    """The gradient of a group's aggregated rows ``u`` from the aggregate's, ``g_agg``."""
    rb, gg = run.rb, group.graph
    if run.reduce in ("max", "min"):
        gu, _ = kernels.spmm_minmax_grad(gg, "copy_lhs", run.reduce, u.detach(), None, g_agg,
                                         run.state.winner, group.first_chunk, rb.chunk_rows)
        return gu
    div = None
    if run.reduce == "mean":
        div = rb.in_deg.clamp(min=1).to(g_agg.dtype)[gg.dst.long()]
    return kernels.spmm_linear_grad(gg, "copy_lhs", g_agg, None, tuple(u.shape),
                                    rb.chunk_rows, div)


def _gat_dsum(run: Run, g_agg: torch.Tensor, kept: Optional[Kept], el_kept: list,
              dsum: torch.Tensor) -> list:
    """With compression: the softmax term ``D_i = sum_j a_ij <g_i, ft_j>`` from the groups'
    rows as backward reads them (the kept projection, INT2), not off the INT2 aggregate.

    The logits' gradients are ``a_ij (<g_i, ft_j> - D_i)``: with ``D`` from a separately
    quantized aggregate, their sum over a destination's edges is quantization noise
    instead of zero, which the destination and source terms' gradients pick up (a
    rematerialized output layer lost 6 points of accuracy that way). One more pass over
    the groups, without pulling or projecting rows where the projection is kept. Returns
    per group its chunks' ``<g_i, ft_j>``, which the gradient pass then reads (edges x
    heads: 1/64 of the rows' size at 64 features per head) instead of computing again.
    """
    rb, st = run.rb, run.soft
    dots: list = []
    for i, group in enumerate(rb.groups):
        if kept is not None:
            ft = kept.chunk(i)
        else:
            with torch.no_grad():
                run.call(group, run.dst_stub())
            ft = run.captured[0].detach()
            run.captured = ()
            if run.input is not None:
                run.input.take_leaves()  # rows read without grad: no gradient to route
        dots.append([])
        kernels.attention_dsum(dsum, group.graph, ft, el_kept[i], run.er, st.m, st.den,
                               g_agg, run.slope, rb.chunk_rows, dots=dots[-1])
        del ft
    return dots


def _gat_source_grads(run: Run, i: int, group: Group, el_kept: Optional[list],
                      dots: Optional[list], g_agg: torch.Tensor, dsum: torch.Tensor,
                      grad_er: torch.Tensor) -> list:
    """One group's gradients where the source side is a plain projection
    (:func:`projection_keepable`): the attention's gradients from the core, then
    :func:`source_grads` instead of the group's rows run again under autograd. The rows
    are pulled for the weight gradient; with compression their projection is not even
    decoded (the softmax-term pass left the per-edge dots and the logits are kept)."""
    conv, params, st = run.conv, run.params, run.soft
    with torch.enable_grad():  # learnable rows (embeddings, a later layer's input) keep a graph
        x = run.pull_rows(group)
    if dots is not None:
        ft = x.new_zeros(()).expand(x.shape[0], *run.ft_shape)  # only its shape is read
    else:
        ft = source_projection(conv, x)
    el = el_kept[i] if el_kept is not None else (ft * conv.attn_l.detach()).sum(-1, True)
    gft, gel = kernels.attention_grads(group.graph, ft, el, run.er, st.m, st.den, g_agg,
                                       dsum, run.slope, run.rb.chunk_rows, grad_er,
                                       dots=dots)
    del ft
    g_w, g_attn, g_x = source_grads(conv, x, gft, gel, x.requires_grad)
    got: list = [None] * len(params)
    for t, g in ((source_weight(conv), g_w), (conv.attn_l, g_attn)):
        k = next((k for k, p in enumerate(params) if p is t), None)
        if k is not None:
            got[k] = g
    if g_x is not None:  # through the rows' own graph to the embeddings / the input
        accumulate(got, run.grad(x, params, g_x))
    return got


def _gat_backward(run: Run, g_agg: torch.Tensor, dsum: torch.Tensor):
    """GAT's gradients: per group the attention's (and the source side's), then the
    destination term's."""
    rb, params, st = run.rb, run.params, run.soft
    run.mode = Phase.PARTIAL
    grad_er = torch.zeros_like(st.den)
    grads: list[Optional[torch.Tensor]] = [None] * len(params)
    kept, run.ft_kept = run.ft_kept, None
    el_kept, run.el_kept = run.el_kept, None
    dots = _gat_dsum(run, g_agg, kept, el_kept, dsum) if el_kept is not None else None
    explicit = projection_keepable(run.conv)
    for i, group in enumerate(rb.groups):
        group_dots = None if dots is None else dots[i]
        if explicit:
            got = _gat_source_grads(run, i, group, el_kept, group_dots, g_agg, dsum, grad_er)
            accumulate(grads, got)
            continue
        with torch.enable_grad(), run.compress():  # the group's rows under autograd
            run.call(group, run.dst_stub())
            ft, el, er = run.captured
            run.captured = ()
            el_fwd = el.detach() if el_kept is None else el_kept[i]
            gft, gel = kernels.attention_grads(group.graph, ft.detach(), el_fwd,
                                               er.detach(), st.m, st.den, g_agg, dsum,
                                               run.slope, rb.chunk_rows, grad_er,
                                               dots=group_dots)
            got = run.grad([ft, el], params, [gft, gel])
        accumulate(grads, got)
        del ft, el, er, gft, gel, got
    # the destination term's gradient, through its graph rebuilt now (cheaper in memory
    # than keeping the output run's graph, with the destination rows, across the groups)
    for a, b in run.dst_chunks():
        with torch.enable_grad():
            er = dst_term(run.conv, run.pull_dst(a, b))
            got = run.grad(er, params, grad_er[a:b])
        accumulate(grads, got)
    return grads


def accumulate(grads: list, got) -> None:
    """Add the gradients ``got`` (None: no contribution) into ``grads`` in place."""
    for i, g in enumerate(got):
        if g is not None:
            grads[i] = g if grads[i] is None else grads[i] + g
