"""Fused GAT attention for SAR: online edge softmax over the ring, recomputed in backward.

``GatAttention`` computes, for every local destination i, ``sum_j softmax_j(e_ij) ft_j`` with
``e_ij = leaky_relu(el_j + er_i)`` (GATConv's attention and aggregation in one op), visiting the
remote parts one at a time. Forward keeps a running per-destination max, denominator and
weighted sum, rescaling them when the max grows (online softmax), and frees each part's rows
and edge values before the next; it saves only the local inputs and the per-node max and
denominator: no per-edge logits or attention and no output, for any part.

Backward rebuilds each part's attention from those stats. The softmax gradient needs
``D_i = sum_j a_ij <g_i, ft_j>`` for every destination before any logit gradient is known, so
the ring runs twice: pass 1 accumulates ``D`` (N x heads), pass 2 computes the gradients of the
part's ``ft`` and ``el`` rows (returned to their owner) and of the local ``er``. That is one
more fetch than a saved output would need, traded for an N x heads x F tensor per layer.

``gat_forward`` replaces ``GATConv.forward`` on a model's instances (see
``dsgraph.sar.model.prepare_model``); it runs this op only on a SAR graph in ``sar`` mode with
remote rows, and defers to DGL's own forward everywhere else (plain graphs, ``sa`` and
``one_shot`` modes, edge weights, attention dropout in training, ``get_attention``).
"""
from __future__ import annotations

from typing import Optional

import dgl
import torch
from dgl import DGLError

from dsgraph.sar.comm import GradPush
from dsgraph.sar.graph import SarGraph
from dsgraph.sar.ops import Runtime
from dsgraph.savepolicy import SaveKind, SavePolicy, SavePolicyFunction


def _logits(g, el: torch.Tensor, er: torch.Tensor, slope: float) -> torch.Tensor:
    """``leaky_relu(el_u + er_v)`` per edge of shard graph ``g``: E x heads x 1.

    With ``slope >= 0`` the result is > 0 exactly where its input is, so backward reads the
    leaky_relu derivative off the logits and the input need not be kept.
    """
    return torch.nn.functional.leaky_relu_(dgl.ops.gsddmm(g, "add", el, er, "u", "v"), slope)


def _attention(g, s: torch.Tensor, m: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """Softmax weights of the edges of ``g`` from their logits and the saved node stats."""
    a = dgl.ops.gsddmm(g, "sub", s, m, "e", "v").exp_()
    return dgl.ops.gsddmm(g, "div", a, den, "e", "v")


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
        m = ft.new_full((n, heads, 1), float("-inf"))
        den = ft.new_zeros((n, heads, 1))
        acc: Optional[torch.Tensor] = None
        for j, rows in rt.fetch((ft, el)):
            if j != plan.rank and not plan.shard_has_edges(j):
                continue
            ftj, elj = rows
            g = plan.shard(j)
            s = _logits(g, elj, er, slope)
            del elj
            mj = dgl.ops.gspmm(g, "copy_rhs", "max", None, s)
            mj.masked_fill_(~plan.has_in_edge(j).view(-1, 1, 1), float("-inf"))
            m_new = torch.maximum(m, mj)
            del mj
            # old terms were scaled by exp(-m); bring them to exp(-m_new). -inf - -inf (no edge
            # yet on either side) is nan: nothing accumulated there, any finite factor works.
            scale = torch.exp(m - m_new).nan_to_num_(0.0)
            p = dgl.ops.gsddmm(g, "sub", s, m_new, "e", "v").exp_()
            del s
            den.mul_(scale).add_(dgl.ops.gspmm(g, "copy_rhs", "sum", None, p))
            part = dgl.ops.gspmm(g, "mul", "sum", ftj, p)
            del p, ftj, rows
            if acc is None:
                acc = part
            else:
                acc.mul_(scale).add_(part)
            del part, scale
            m = m_new
        if acc is None:  # no edges at all
            acc = ft.new_zeros((n,) + tuple(ft.shape[1:]))
        acc.div_(torch.where(den > 0, den, torch.ones_like(den)))  # no in-edge: 0, as DGL
        ctx.rt, ctx.slope = rt, slope
        ctx.save_for_backward(ft, el, er, m, den)
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
        for j, rows in rt.fetch((ft, el)):
            if j != k and not plan.shard_has_edges(j):
                continue
            ftj, elj = rows
            g = plan.shard(j)
            a = _attention(g, _logits(g, elj, er, slope), m, den)
            a.mul_(dgl.ops.gsddmm(g, "dot", ftj, gout, "u", "v"))
            dsum.add_(dgl.ops.gspmm(g, "copy_rhs", "sum", None, a))
            del a, ftj, elj, rows
        # pass 2: gradients of each part's ft and el rows (sent to the owner) and of local er
        grad_ft: Optional[torch.Tensor] = None
        grad_el: Optional[torch.Tensor] = None
        grad_er = torch.zeros_like(er)
        push = GradPush(rt.comm, plan.need, plan.send_rows, None,
                        [tuple(ft.shape[1:]), tuple(el.shape[1:])], ft.dtype,
                        rt.prefetch) if n > 1 else None
        for j, rows in rt.fetch((ft, el)):
            if j != k and not plan.shard_has_edges(j):
                if push is not None:
                    push.push((k - j) % n, None)
                continue
            ftj, elj = rows
            g, rg = plan.shard(j), plan.reverse_shard(j)
            s = _logits(g, elj, er, slope)
            a = _attention(g, s, m, den)
            gft = dgl.ops.gspmm(rg, "mul", "sum", gout, a)
            gs = dgl.ops.gsddmm(g, "dot", ftj, gout, "u", "v")
            del ftj, elj, rows
            gs = dgl.ops.gsddmm(g, "sub", gs, dsum, "e", "v").mul_(a)
            del a
            gz = torch.where(s > 0, gs, gs * slope)  # leaky_relu backward, as torch computes it
            del s, gs
            gel = dgl.ops.gspmm(rg, "copy_rhs", "sum", None, gz)
            grad_er.add_(dgl.ops.gspmm(g, "copy_rhs", "sum", None, gz))
            del gz
            if j == k:
                grad_ft, grad_el = gft, gel
                if push is not None:
                    push.grad_x = [grad_ft, grad_el]
            else:
                push.push((k - j) % n, (gft, gel))
            del gft, gel
        if push is not None:
            push.finish()
        return None, grad_ft, grad_el, grad_er, None


def _fallback(conv, graph, feat, edge_weight, get_attention) -> bool:
    return (not isinstance(graph, SarGraph) or not graph.fused_attention_ok()
            or edge_weight is not None or get_attention or isinstance(feat, tuple)
            or (conv.training and conv.attn_drop.p > 0)
            or not isinstance(conv.leaky_relu, torch.nn.LeakyReLU)
            or conv.leaky_relu.negative_slope < 0)


def gat_forward(conv, graph, feat, edge_weight=None, get_attention=False):
    """``dgl.nn.GATConv.forward`` with the attention and aggregation done by ``GatAttention``.

    Same computation, parameters and RNG use as DGL 2.1's forward (feature dropout, fc,
    attention vectors, residual, bias, activation); anything else goes to DGL's forward.
    """
    if _fallback(conv, graph, feat, edge_weight, get_attention):
        return type(conv).forward(conv, graph, feat, edge_weight, get_attention)
    if not conv._allow_zero_in_degree and bool((graph.in_degrees() == 0).any()):
        raise DGLError("There are 0-in-degree nodes in the graph, output for those nodes will "
                       "be invalid. Setting ``allow_zero_in_degree`` to be `True` when "
                       "constructing this module will suppress the check.")
    heads, out = conv._num_heads, conv._out_feats
    prefix = feat.shape[:-1]
    h = conv.feat_drop(feat)
    ft = conv.fc(h).view(*prefix, heads, out)
    el = (ft * conv.attn_l).sum(dim=-1).unsqueeze(-1)
    er = (ft * conv.attn_r).sum(dim=-1).unsqueeze(-1)
    rst = GatAttention.apply(graph._rt, ft, el, er, float(conv.leaky_relu.negative_slope))
    if conv.res_fc is not None:
        rst = rst + conv.res_fc(h).view(*prefix, -1, out)
    if conv.has_explicit_bias:
        rst = rst + conv.bias.view(*((1,) * len(prefix)), heads, out)
    if conv.activation:
        rst = conv.activation(rst)
    return rst
