"""One shard of a SAR builtin: what it computes, and its gradients (the pieces ``ShardOp`` uses).

A shard is the edges from one part's rows into this worker's nodes (:mod:`dsgraph.sar.plan`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import dgl
import torch

from dsgraph.sar.plan import ShardPlan
from dsgraph.seqagg import kernels


@dataclass(frozen=True)
class OpSpec:
    """One builtin: ``kind`` 'spmm' (op, reduce) or 'sddmm' (op, lhs/rhs targets u/v/e)."""

    kind: str
    op: str
    reduce: str = "sum"
    lhs: str = "u"
    rhs: str = "e"


def compute(spec: OpSpec, g, uj, v, ej) -> torch.Tensor:
    """Run the builtin on one shard graph ``g`` (u rows of that shard, local v, shard edges)."""
    if spec.kind == "spmm":
        red = "sum" if spec.reduce == "mean" else spec.reduce
        if spec.op == "copy_lhs":
            return dgl.ops.gspmm(g, "copy_lhs", red, uj, None)
        return dgl.ops.gspmm(g, spec.op, red, uj, ej)
    data = {"u": uj, "v": v, "e": ej}
    rhs = None if spec.op == "copy_lhs" else data[spec.rhs]
    return dgl.ops.gsddmm(g, spec.op, data[spec.lhs], rhs, spec.lhs,
                          spec.rhs if rhs is not None else "v")


def is_linear(spec: OpSpec, v_grad: bool, e_grad: bool) -> bool:
    """Whether backward can skip refetching source rows."""
    if spec.kind == "spmm":
        if spec.reduce not in ("sum", "mean"):
            return False
        return spec.op == "copy_lhs" or (spec.op in ("mul", "div") and not e_grad)
    return spec.op in ("add", "sub", "copy_lhs") and "u" in (spec.lhs, spec.rhs)


def linear_grads(spec: OpSpec, plan: ShardPlan, j: int, gout: torch.Tensor,
                 u_shape: tuple, v: Optional[torch.Tensor], ej: Optional[torch.Tensor],
                 need_u: bool, need_v: bool, need_e: bool, chunk_rows: int = 0,
                 rows: Optional[tuple[int, int]] = None):
    """Gradients of one shard of a linear op: (u rows of shard j, or of its rows ``[a, b)``
    (spmm only), v contribution, e slice)."""
    gu = gv = ge = None
    if spec.kind == "spmm":
        if need_u:
            per_edge = spec.op == "copy_lhs" and spec.reduce == "mean"
            gu = kernels.spmm_linear_grad(
                plan.group(j), spec.op, gout, ej, u_shape, chunk_rows,
                plan.edge_dst_degree(j, gout.dtype) if per_edge else None, rows)
        return gu, gv, ge
    # sddmm add/sub/copy: d out / d operand = +-1 per edge
    sign = {"lhs": 1.0, "rhs": -1.0 if spec.op == "sub" else 1.0}
    for side, target in (("lhs", spec.lhs), ("rhs", spec.rhs)):
        if side == "rhs" and spec.op == "copy_lhs":
            continue
        ge_side = gout if sign[side] > 0 else -gout
        if target == "u" and need_u:
            gu = kernels.sum_to(dgl.ops.gspmm(plan.reverse_shard(j), "copy_rhs", "sum", None,
                                              ge_side), u_shape)
        elif target == "v" and need_v:
            gv = kernels.sum_to(dgl.ops.gspmm(plan.shard(j), "copy_rhs", "sum", None, ge_side),
                                v.shape)
        elif target == "e" and need_e:
            ge = kernels.sum_to(ge_side, ej.shape)
    return gu, gv, ge


def leaves(uj, v, ej, needs):
    """Detached copies-by-reference of a shard's inputs that track gradients where needed."""
    out = []
    for t, need in zip((uj, v, ej), needs):
        out.append(None if t is None else t.detach().requires_grad_(need))
    return tuple(out)


def grads_of(p: torch.Tensor, inputs, gp: torch.Tensor, needs):
    """(grad of u rows, grad of v, grad of e slice) of one shard's result ``p`` (``inputs``:
    its :func:`leaves`)."""
    wanted = [t for t, need in zip(inputs, needs) if t is not None and need]
    grads = torch.autograd.grad(p, wanted, gp, allow_unused=True) if wanted else ()
    it = iter(grads)
    out = []
    for t, need in zip(inputs, needs):
        if t is not None and need:
            g = next(it)
            out.append(torch.zeros_like(t) if g is None else g)
        else:
            out.append(None)
    return tuple(out)
