"""Sequential aggregation over shards as autograd functions (SAR, SA) plus the one-shot fetch.

``ShardOp`` runs one DGL builtin (a gspmm for ``update_all``, a gsddmm for ``apply_edges``)
shard by shard: the rows of one remote part are fetched, folded into the local result and
dropped (aggregations in ``sar`` mode with ``chunk_rows`` > 0: piece by piece, see
:mod:`dsgraph.sar.comm`). Aggregations (gspmm) go through the sequential-aggregation core
(:mod:`dsgraph.seqagg.kernels`), ``chunk_rows`` source rows at a time. Only the local inputs are saved for backward. Backward either pushes gradients
through each shard without any source values (linear cases: copy_u/u_mul_e/u_div_e with sum
or mean, u_add_v/u_sub_v) or rematerializes each shard under autograd (everything else:
max/min reductions, GAT's u_mul_e when the attention needs a gradient) and returns the
gradient of the fetched rows to their owners. In ``sa`` mode non-linear shards keep their
fetched rows and autograd graphs from the forward pass instead of recomputing. (GATConv in
``sar`` mode does not come here: its attention runs fused, see ``dsgraph.sar.attention``.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import dgl
import torch

from dsgraph.sar.comm import Comm, GradPush, PiecePush, fetch_pieces, ring_fetch
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


@dataclass
class Runtime:
    """What a SAR op needs at run time: the plan, the communicator and the mode."""

    plan: ShardPlan
    comm: Comm
    mode: str = "sar"
    prefetch: bool = False
    chunk_rows: int = 0  # source rows per chunk of the core's kernels (0: a whole shard)
    # the active dsgraph.sar.rebuild.RebuildInputAggregates (told of every aggregation), if any
    rebuild: Optional[Any] = None

    def fetch(self, x: torch.Tensor):
        """Ring over parts yielding (part, rows needed from it); local part first."""
        return ring_fetch(self.comm, self.plan.need, self.plan.send_rows, x, self.prefetch)

    @property
    def piecewise(self) -> bool:
        """Whether remote rows move in pieces of ``chunk_rows`` (see ``dsgraph.sar.comm``)."""
        return self.mode == "sar" and self.chunk_rows > 0 and self.plan.world > 1

    def fetch_rows(self, x):
        """Ring over parts yielding ``(part, a, rows)``: the rows needed from the part from row
        ``a`` on; local part first (whole). In pieces when :attr:`piecewise`, else whole parts
        (``a`` 0). The consumer must drop each before asking for the next."""
        if self.piecewise:
            yield from fetch_pieces(self.comm, self.plan.pieces(self.chunk_rows),
                                    self.plan.send_rows, x)
            return
        for j, rows in self.fetch(x):
            yield j, 0, rows
            del rows

    def pusher(self, grad_x, row_shape, dtype: torch.dtype, pieces: bool = True):
        """Returns gradients of what :meth:`fetch_rows` (``pieces``, else :meth:`fetch`)
        brought: ``push(part, a, grads)`` for every item after the local part, in order; then
        ``finish()``."""
        plan = self.plan
        if pieces and self.piecewise:
            return PiecePush(self.comm, plan.pieces(self.chunk_rows), plan.send_rows, grad_x,
                             row_shape, dtype)
        return GradPush(self.comm, plan.need, plan.send_rows, grad_x, row_shape, dtype,
                        self.prefetch)


_sum_to = kernels._sum_to


def _compute(spec: OpSpec, g, uj, v, ej) -> torch.Tensor:
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


def _is_linear(spec: OpSpec, v_grad: bool, e_grad: bool) -> bool:
    """Whether backward can skip refetching source rows."""
    if spec.kind == "spmm":
        if spec.reduce not in ("sum", "mean"):
            return False
        return spec.op == "copy_lhs" or (spec.op in ("mul", "div") and not e_grad)
    return spec.op in ("add", "sub", "copy_lhs") and "u" in (spec.lhs, spec.rhs)


def _linear_grads(spec: OpSpec, plan: ShardPlan, j: int, gout: torch.Tensor,
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
            gu = _sum_to(dgl.ops.gspmm(plan.reverse_shard(j), "copy_rhs", "sum", None, ge_side),
                         u_shape)
        elif target == "v" and need_v:
            gv = _sum_to(dgl.ops.gspmm(plan.shard(j), "copy_rhs", "sum", None, ge_side), v.shape)
        elif target == "e" and need_e:
            ge = _sum_to(ge_side, ej.shape)
    return gu, gv, ge


class ShardOp(torch.autograd.Function):
    """Sequential, shard-by-shard builtin with SAR/SA backward (see module docstring)."""

    @staticmethod
    def forward(ctx, rt: Runtime, spec: OpSpec, u: torch.Tensor, v: Optional[torch.Tensor],
                e: Optional[torch.Tensor]) -> torch.Tensor:
        plan = rt.plan
        ctx.rt, ctx.spec = rt, spec
        ctx.needs = tuple(ctx.needs_input_grad[2:5])
        ctx.rng = torch.get_rng_state()  # replayed when rematerializing (see _remat)
        linear = _is_linear(spec, ctx.needs[1], ctx.needs[2])
        keep = rt.mode == "sa" and not linear and any(ctx.needs)
        ctx.first_chunk = None
        if spec.kind == "spmm" and not keep:
            acc = _core_spmm(ctx, rt, spec, u, e)
            ctx.kept, ctx.linear, ctx.u_shape = None, linear, tuple(u.shape)
            ctx.save_for_backward(u, v, e)
            return acc
        kept: list = []
        acc: Optional[torch.Tensor] = None
        winner: Optional[torch.Tensor] = None
        minmax = spec.kind == "spmm" and spec.reduce in ("max", "min")
        for j, uj in rt.fetch(u):
            if j != plan.rank and not plan.shard_has_edges(j):
                continue
            ej = plan.edge_slice(e, j)
            g = plan.shard(j)
            if keep:
                leaves = _leaves(uj, v, ej, ctx.needs)
                with torch.enable_grad():
                    p_graph = _compute(spec, g, *leaves)
                kept.append((j, leaves, p_graph))
                p = p_graph.detach()
            else:
                p = _compute(spec, g, uj, v, ej)
            del uj
            if spec.kind == "sddmm":
                if acc is None:
                    acc = p.new_empty((plan.num_edges,) + tuple(p.shape[1:]))
                acc[plan.edge_offsets[j]:plan.edge_offsets[j + 1]] = p
            elif not minmax:
                acc = p if acc is None else acc.add_(p)
            else:
                has = plan.has_in_edge(j).view((-1,) + (1,) * (p.dim() - 1))
                fill = float("-inf") if spec.reduce == "max" else float("inf")
                p = p.masked_fill(~has, fill)
                if acc is None:
                    wtype = torch.int8 if plan.world < 128 else torch.int16
                    acc, winner = p, torch.full(p.shape, j, dtype=wtype)
                else:
                    better = p > acc if spec.reduce == "max" else p < acc
                    acc = torch.where(better, p, acc)  # strict: the first part in ring order wins
                    winner.masked_fill_(better, j)
            del p
        if spec.kind == "spmm":
            deg = plan.in_degrees.view((-1,) + (1,) * (acc.dim() - 1))
            if spec.reduce == "mean":  # in place: acc is this op's own buffer unless kept
                d = deg.clamp(min=1).to(acc.dtype)
                acc = acc / d if keep else acc.div_(d)
            elif minmax:
                # as DGLGraph.update_all: no message -> 0, and no gradient flows there
                dead = torch.isinf(acc)
                winner.masked_fill_(dead, -1)
                acc = acc.masked_fill(dead, 0.0)
                del dead
        ctx.kept = kept if keep else None
        ctx.winner = winner  # sa: the part that won (its kept graph gets the gradient)
        ctx.linear = linear
        ctx.u_shape = tuple(u.shape)
        ctx.save_for_backward(u, v, e)
        return acc

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        rt, spec, plan = ctx.rt, ctx.spec, ctx.rt.plan
        u, v, e = ctx.saved_tensors
        need_u, need_v, need_e = ctx.needs
        # copy_u + mean divides per edge inside each shard's transposed SpMM (see
        # _linear_grads): no node-sized copy of gout / degree stays alive through backward.
        per_edge_mean = ctx.linear and spec.kind == "spmm" and spec.reduce == "mean" \
            and spec.op == "copy_lhs"
        if spec.kind == "spmm" and spec.reduce == "mean" and not per_edge_mean:
            deg = plan.in_degrees.view((-1,) + (1,) * (gout.dim() - 1))
            gout = gout / deg.clamp(min=1).to(gout.dtype)
        # Gradient buffers are taken over from the local shard (processed first) when it
        # already covers them, so no zero-filled copy of u or e stays alive beside it.
        grads = {"u": None, "v": torch.zeros_like(v) if need_v else None, "e": None}
        # a linear aggregation returns its remote gradients in pieces when transfers go in
        # pieces (its forward fetched them so); the other paths fetch whole parts again
        pieces = ctx.linear and rt.piecewise and spec.kind == "spmm"
        push = rt.pusher(None, tuple(u.shape[1:]), u.dtype, pieces) \
            if need_u and plan.world > 1 else None

        def shard_grad(j: int) -> torch.Tensor:
            if spec.kind == "sddmm":
                return plan.edge_slice(gout, j)
            if ctx.winner is not None:
                return gout.masked_fill(ctx.winner != j, 0.0)
            return gout

        def deliver(j: int, gu, gv, ge) -> None:
            if gv is not None:
                grads["v"].add_(gv)
            if need_e:
                if grads["e"] is None:
                    whole = ge is not None and ge.shape[0] == plan.num_edges
                    grads["e"] = ge if whole else torch.zeros_like(e)
                    if whole:
                        ge = None
                if ge is not None:
                    plan.edge_slice(grads["e"], j).copy_(ge)
            if j == plan.rank:
                if need_u:
                    grads["u"] = gu if gu is not None and gu.shape == u.shape \
                        and gu.is_contiguous() else torch.zeros_like(u) + (0 if gu is None else gu)
                    if push is not None:
                        push.grad_x = grads["u"]
            elif push is not None:
                push.push(j, 0, gu)

        order = [(plan.rank - r) % plan.world for r in range(plan.world)]
        if pieces:
            # the local part whole, then each remote part's gradient piece by piece, each
            # returned to its owner as it is computed
            j = plan.rank
            deliver(j, *_linear_grads(spec, plan, j, shard_grad(j), ctx.u_shape, v,
                                      plan.edge_slice(e, j), need_u, need_v, need_e,
                                      rt.chunk_rows))
            for p in plan.pieces(rt.chunk_rows) if push is not None else ():
                gu = None
                if p.rows[1] > p.rows[0] and plan.shard_has_edges(p.src):
                    gu = _linear_grads(spec, plan, p.src, shard_grad(p.src), ctx.u_shape, v,
                                       plan.edge_slice(e, p.src), True, False, False,
                                       rt.chunk_rows, p.rows)[0]
                push.push(p.src, p.rows[0], gu)
                del gu
        elif ctx.linear:
            for j in order:
                if j != plan.rank and not plan.shard_has_edges(j):
                    deliver(j, None, None, None)
                    continue
                ej = plan.edge_slice(e, j)
                deliver(j, *_linear_grads(spec, plan, j, shard_grad(j), ctx.u_shape, v, ej,
                                          need_u, need_v, need_e, rt.chunk_rows))
        elif ctx.kept is not None:  # sa: reuse the forward's shard graphs
            # in ring order, empty shards included: every worker pushes round 1, 2, ... in turn
            kept = {j: (leaves, p) for j, leaves, p in ctx.kept}
            ctx.kept = None
            for j in order:
                if j in kept:
                    leaves, p = kept.pop(j)
                    deliver(j, *_grads_of(p, leaves, shard_grad(j), ctx.needs))
                    del leaves, p
                else:
                    deliver(j, None, None, None)
        elif ctx.first_chunk is not None and ctx.winner is not None:
            # sar max/min: refetch each shard; each chunk gets the gradient where it won
            for j, uj in rt.fetch(u):
                if j not in ctx.first_chunk:
                    deliver(j, None, None, None)
                    continue
                ej = plan.edge_slice(e, j)
                gu, ge = kernels.spmm_minmax_grad(plan.group(j), spec.op, spec.reduce, uj, ej,
                                                  gout, ctx.winner, ctx.first_chunk[j],
                                                  rt.chunk_rows, need_e)
                del uj
                deliver(j, gu if need_u else None, None, ge)
                del gu, ge
        else:  # sar: refetch each shard's rows and recompute it under autograd
            with torch.random.fork_rng(devices=[]):
                for j, uj in rt.fetch(u):
                    if j != plan.rank and not plan.shard_has_edges(j):
                        deliver(j, None, None, None)
                        continue
                    torch.set_rng_state(ctx.rng)
                    leaves = _leaves(uj, v, plan.edge_slice(e, j), ctx.needs)
                    del uj
                    with torch.enable_grad():
                        p = _compute(spec, plan.shard(j), *leaves)
                    deliver(j, *_grads_of(p, leaves, shard_grad(j), ctx.needs))
                    del p, leaves
        if push is not None:
            push.finish()
        ctx.winner = None
        if need_e and grads["e"] is None:
            grads["e"] = torch.zeros_like(e)
        return None, None, grads["u"], grads["v"], grads["e"]


def _core_spmm(ctx, rt: Runtime, spec: OpSpec, u: torch.Tensor,
               e: Optional[torch.Tensor]) -> torch.Tensor:
    """Forward of an aggregation: every shard folded into destination state by the core."""
    plan = rt.plan
    state = kernels.SpmmState(spec.reduce)
    first: dict[int, int] = {}
    for j, a, uj in rt.fetch_rows(u):
        if j != plan.rank and (not plan.shard_has_edges(j) or uj.shape[0] == 0):
            continue
        f = kernels.spmm_fold(state, plan.group(j), spec.op, uj, plan.edge_slice(e, j),
                              rt.chunk_rows, a)
        first.setdefault(j, f)
        del uj
    rows = tuple(u.shape[1:]) if spec.op == "copy_lhs" or e is None else \
        tuple(torch.broadcast_shapes(tuple(u.shape[1:]), tuple(e.shape[1:])))
    acc = kernels.spmm_finish(state, plan.num_local, rows, plan.in_degrees, u.dtype)
    ctx.winner, ctx.first_chunk = state.winner, first
    return acc


def _leaves(uj, v, ej, needs):
    """Detached copies-by-reference of a shard's inputs that track gradients where needed."""
    out = []
    for t, need in zip((uj, v, ej), needs):
        out.append(None if t is None else t.detach().requires_grad_(need))
    return tuple(out)


def _grads_of(p: torch.Tensor, leaves, gp: torch.Tensor, needs):
    """(grad of u rows, grad of v, grad of e slice) of one shard's result ``p``."""
    wanted = [t for t, need in zip(leaves, needs) if t is not None and need]
    grads = torch.autograd.grad(p, wanted, gp, allow_unused=True) if wanted else ()
    it = iter(grads)
    out = []
    for t, need in zip(leaves, needs):
        if t is not None and need:
            g = next(it)
            out.append(torch.zeros_like(t) if g is None else g)
        else:
            out.append(None)
    return tuple(out)


class HaloFetch(torch.autograd.Function):
    """One-shot mode: fetch every halo row of ``x`` at once; backward returns their gradients."""

    @staticmethod
    def forward(ctx, rt: Runtime, x: torch.Tensor) -> torch.Tensor:
        plan, comm = rt.plan, rt.comm
        k, n = plan.rank, plan.world
        tag = comm.next_tag()
        halo = x.new_empty((plan.num_halo,) + tuple(x.shape[1:]))
        works, sends = [], []
        for j in range(n):
            if j == k:
                continue
            if plan.need[j]:
                a = plan.halo_offsets[j]
                works.append(comm.irecv(halo[a:a + plan.need[j]], j, tag))
            if plan.send_rows[j].numel():
                sends.append(x.detach().index_select(0, plan.send_rows[j]))
                works.append(comm.isend(sends[-1], j, tag))
        for w in works:
            w.wait()
        ctx.rt = rt
        ctx.x_shape = tuple(x.shape)
        return halo

    @staticmethod
    def backward(ctx, ghalo: torch.Tensor):
        plan, comm = ctx.rt.plan, ctx.rt.comm
        k, n = plan.rank, plan.world
        tag = comm.next_tag()
        ghalo = ghalo.contiguous()
        grad_x = ghalo.new_zeros(ctx.x_shape)
        works, recvs = [], []
        for j in range(n):
            if j == k:
                continue
            if plan.send_rows[j].numel():
                buf = ghalo.new_empty((plan.send_rows[j].numel(),) + ctx.x_shape[1:])
                recvs.append((j, buf))
                works.append(comm.irecv(buf, j, tag))
            if plan.need[j]:
                a = plan.halo_offsets[j]
                works.append(comm.isend(ghalo[a:a + plan.need[j]], j, tag))
        for w in works:
            w.wait()
        for j, buf in recvs:
            grad_x.index_add_(0, plan.send_rows[j], buf)
        return None, grad_x
