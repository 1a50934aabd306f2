"""Sequential aggregation over shards as autograd functions (SAR, SA) plus the one-shot fetch.

``ShardOp`` runs one DGL builtin (a gspmm for ``update_all``, a gsddmm for ``apply_edges``)
shard by shard: the rows of one remote part are fetched, folded into the local result and
dropped (aggregations in ``sar`` mode with ``chunk_rows`` > 0: piece by piece, see
:mod:`dsgraph.sar.comm`). Aggregations (gspmm) go through the sequential-aggregation core
(:mod:`dsgraph.seqagg.kernels`), ``chunk_rows`` source rows at a time. Only the local inputs
are saved for backward (:mod:`dsgraph.sar.shard_backward`), which either pushes gradients
through each shard without any source values (linear cases: copy_u/u_mul_e/u_div_e with sum
or mean, u_add_v/u_sub_v) or rematerializes each shard under autograd (everything else:
max/min reductions, GAT's u_mul_e when the attention needs a gradient) and returns the
gradient of the fetched rows to their owners. In ``sa`` mode non-linear shards keep their
fetched rows and autograd graphs from the forward pass instead of recomputing. (GATConv in
``sar`` mode does not come here: its attention runs fused, see ``dsgraph.sar.attention``.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch

from dsgraph.sar.comm import Comm, GradPush, PiecePush, fetch_pieces, ring_fetch
from dsgraph.sar.plan import ShardPlan
from dsgraph.sar.shard import OpSpec, compute, is_linear, leaves
from dsgraph.sar.shard_backward import ShardBackward
from dsgraph.seqagg import kernels


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


class ShardOp(torch.autograd.Function):
    """Sequential, shard-by-shard builtin with SAR/SA backward (see module docstring)."""

    @staticmethod
    def forward(ctx, rt: Runtime, spec: OpSpec, u: torch.Tensor, v: Optional[torch.Tensor],
                e: Optional[torch.Tensor]) -> torch.Tensor:
        ctx.rt, ctx.spec = rt, spec
        ctx.needs = tuple(ctx.needs_input_grad[2:5])
        ctx.rng = torch.get_rng_state()  # replayed when rematerializing (ShardBackward)
        ctx.linear = is_linear(spec, ctx.needs[1], ctx.needs[2])
        ctx.u_shape = tuple(u.shape)
        ctx.kept = ctx.winner = ctx.first_chunk = None
        keep = rt.mode == "sa" and not ctx.linear and any(ctx.needs)
        if spec.kind == "sddmm":
            acc = _sddmm(ctx, rt, spec, u, v, e, keep)
        elif keep:
            acc = _kept_spmm(ctx, rt, spec, u, v, e)
        else:
            acc = _core_spmm(ctx, rt, spec, u, e)
        ctx.save_for_backward(u, v, e)
        return acc

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        return ShardBackward(ctx, gout).run()


def _row_shape(spec: OpSpec, u: torch.Tensor, e: Optional[torch.Tensor]) -> tuple:
    """Shape of one destination row of an aggregation."""
    if spec.op == "copy_lhs" or e is None:
        return tuple(u.shape[1:])
    return tuple(torch.broadcast_shapes(tuple(u.shape[1:]), tuple(e.shape[1:])))


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
    acc = kernels.spmm_finish(state, plan.num_local, _row_shape(spec, u, e), plan.in_degrees,
                              u.dtype)
    ctx.winner, ctx.first_chunk = state.winner, first
    return acc


def _shard_results(ctx, rt: Runtime, spec: OpSpec, u: torch.Tensor, v: Optional[torch.Tensor],
                   e: Optional[torch.Tensor], keep: bool) -> Iterator[tuple[int, torch.Tensor]]:
    """``(part, result)`` of every shard with edges (the local one always), in ring order, each
    computed whole; with ``keep`` (``sa``) under autograd, its graph appended to ``ctx.kept``."""
    plan = rt.plan
    for j, uj in rt.fetch(u):
        if j != plan.rank and not plan.shard_has_edges(j):
            continue
        ej = plan.edge_slice(e, j)
        g = plan.shard(j)
        if keep:
            inputs = leaves(uj, v, ej, ctx.needs)
            with torch.enable_grad():
                p_graph = compute(spec, g, *inputs)
            ctx.kept.append((j, inputs, p_graph))
            p = p_graph.detach()
        else:
            p = compute(spec, g, uj, v, ej)
        del uj
        yield j, p
        del p


def _kept_spmm(ctx, rt: Runtime, spec: OpSpec, u: torch.Tensor, v: Optional[torch.Tensor],
               e: Optional[torch.Tensor]) -> torch.Tensor:
    """Forward of a non-linear aggregation in ``sa`` mode: each shard's result kept under
    autograd and folded by the core (max/min winners: the part that won)."""
    plan = rt.plan
    ctx.kept = []
    state = kernels.SpmmState(spec.reduce, torch.int8 if plan.world < 128 else torch.int16)
    for j, p in _shard_results(ctx, rt, spec, u, v, e, keep=True):
        kernels.fold_partial(state, p, plan.has_in_edge(j) if state.minmax else None, j)
        del p
    # not in place: the state may be a kept shard's result
    acc = kernels.spmm_finish(state, plan.num_local, _row_shape(spec, u, e), plan.in_degrees,
                              u.dtype, inplace=False)
    ctx.winner = state.winner  # its kept graph gets the gradient
    return acc


def _sddmm(ctx, rt: Runtime, spec: OpSpec, u: torch.Tensor, v: Optional[torch.Tensor],
           e: Optional[torch.Tensor], keep: bool) -> torch.Tensor:
    """Forward of an edge op: every shard's edge values written into place."""
    plan = rt.plan
    ctx.kept = [] if keep else None
    acc: Optional[torch.Tensor] = None
    for j, p in _shard_results(ctx, rt, spec, u, v, e, keep):
        if acc is None:
            acc = p.new_empty((plan.num_edges,) + tuple(p.shape[1:]))
        acc[plan.edge_offsets[j]:plan.edge_offsets[j + 1]] = p
        del p
    return acc


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
