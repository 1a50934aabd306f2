"""Fused GAT attention for SAR: online edge softmax over the ring, recomputed in backward.

``GatAttention`` computes, for every local destination i, ``sum_j softmax_j(e_ij) ft_j`` with
``e_ij = leaky_relu(el_j + er_i)`` (GATConv's attention and aggregation in one op), visiting the
remote parts one at a time. Forward keeps a running per-destination max, denominator and
weighted sum, rescaling them when the max grows (online softmax), and frees each part's rows
and edge values before the next; it saves only the local inputs and the per-node max and
denominator: no per-edge logits or attention and no output, for any part.

Backward rebuilds each part's attention from those stats. The softmax gradient needs
``D_i = sum_j a_ij <g_i, ft_j>`` for every destination before any logit gradient is known, so
the ring runs twice (the per-part work is the shared core's, :mod:`dsgraph.seqagg.kernels`, in
chunks of ``chunk_rows`` rows): pass 1 accumulates ``D`` (N x heads), pass 2 computes the gradients of the
part's ``ft`` and ``el`` rows (returned to their owner) and of the local ``er``. That is one
more fetch than a saved output would need, traded for an N x heads x F tensor per layer.

``gat_forward`` replaces ``GATConv.forward`` on a model's instances (declared in
``dsgraph.sar.model.FORWARDS``, installed by ``dsgraph.sar.model.prepare_model``); it runs
this op only on a SAR graph in ``sar`` mode with remote rows, and defers to DGL's own forward
everywhere else (plain graphs, ``sa`` and ``one_shot`` modes, edge weights, attention dropout
in training, ``get_attention``).
"""
from __future__ import annotations

from typing import Optional

import torch
from dgl import DGLError

from dsgraph.sar.graph import SarGraph
from dsgraph.sar.ops import Runtime
from dsgraph.seqagg import kernels
from dsgraph.seqagg.gat import fusable, gat_fused
from dsgraph.savepolicy import SaveKind, SavePolicy, SavePolicyFunction


class GatAttention(SavePolicyFunction):
    """Fused, ring-scheduled GAT attention + aggregation (see module docstring)."""

    # Backward recomputes the attention from the per-node, per-head saves (shape (..., 1): logits
    # el/er, softmax max and denominator); they re-enter through exp and must match forward's
    # exactly (a max of -inf marks nodes without in-edges; quantized, the recompute diverged and
    # training stalled). The features ft enter backward linearly: quantized as usual.
    save_policy = SavePolicy(per_node=SaveKind.EXACT)

    @staticmethod
    def forward(ctx, rt: Runtime, ft: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                slope: float) -> torch.Tensor:
        plan = rt.plan
        n, heads = plan.num_local, ft.shape[1]
        st = kernels.SoftmaxState(n, heads, ft)
        for j, a, rows in rt.fetch_rows((ft, el)):
            if j != plan.rank and (not plan.shard_has_edges(j) or rows[0].shape[0] == 0):
                continue
            ftj, elj = rows
            del rows
            kernels.attention_fold(st, plan.group(j), ftj, elj, er, slope, rt.chunk_rows, a)
            del ftj, elj
        acc = kernels.attention_finish(st, n, tuple(ft.shape[1:]), ft)
        ctx.rt, ctx.slope = rt, slope
        ctx.save_for_backward(ft, el, er, st.m, st.den)
        return acc

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        rt, slope = ctx.rt, ctx.slope
        plan = rt.plan
        ft, el, er, m, den = ctx.saved_tensors
        gout = gout.contiguous()
        k, n = plan.rank, plan.world
        # pass 1: D_i = sum_j a_ij <g_i, ft_j>, the softmax-gradient term every edge of i needs
        dsum = torch.zeros_like(den)
        for j, a, rows in rt.fetch_rows((ft, el)):
            if j != k and (not plan.shard_has_edges(j) or rows[0].shape[0] == 0):
                continue
            ftj, elj = rows
            del rows
            kernels.attention_dsum(dsum, plan.group(j), ftj, elj, er, m, den, gout, slope,
                                   rt.chunk_rows, a)
            del ftj, elj
        # pass 2: gradients of each part's ft and el rows (sent to the owner) and of local er
        grad_ft: Optional[torch.Tensor] = None
        grad_el: Optional[torch.Tensor] = None
        grad_er = torch.zeros_like(er)
        push = rt.pusher(None, [tuple(ft.shape[1:]), tuple(el.shape[1:])], ft.dtype) \
            if n > 1 else None
        for j, a, rows in rt.fetch_rows((ft, el)):
            if j != k and (not plan.shard_has_edges(j) or rows[0].shape[0] == 0):
                push.push(j, a, None)
                continue
            ftj, elj = rows
            del rows
            gft, gel = kernels.attention_grads(plan.group(j), ftj, elj, er, m, den, gout, dsum,
                                               slope, rt.chunk_rows, grad_er, a)
            del ftj, elj
            if j == k:
                grad_ft, grad_el = gft, gel
                if push is not None:
                    push.grad_x = [grad_ft, grad_el]
            else:
                push.push(j, a, (gft, gel))
            del gft, gel
        if push is not None:
            push.finish()
        return None, grad_ft, grad_el, grad_er, None


def _fallback(conv, graph, feat, edge_weight, get_attention) -> bool:
    return (not isinstance(graph, SarGraph) or not graph.fused_attention_ok()
            or edge_weight is not None or get_attention or isinstance(feat, tuple)
            or not fusable(conv))


def gat_forward(conv, prev, graph, feat, edge_weight=None, get_attention=False):
    """``dgl.nn.GATConv.forward`` with the attention and aggregation done by ``GatAttention``
    (through the shared adapter :func:`dsgraph.seqagg.gat.gat_fused`).

    Same computation, parameters and RNG use as DGL 2.1's forward; anything else goes to
    ``prev``, the layer's forward before patching (DGL's).
    """
    if _fallback(conv, graph, feat, edge_weight, get_attention):
        return prev(graph, feat, edge_weight, get_attention)
    if not conv._allow_zero_in_degree and bool((graph.in_degrees() == 0).any()):
        raise DGLError("There are 0-in-degree nodes in the graph, output for those nodes will "
                       "be invalid. Setting ``allow_zero_in_degree`` to be `True` when "
                       "constructing this module will suppress the check.")
    return gat_fused(conv, feat, lambda ft, el, er, slope: GatAttention.apply(
        graph._rt, ft, el, er, slope))
