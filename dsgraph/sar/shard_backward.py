"""``ShardOp``'s backward: one strategy per kind of op and mode, over shared gradient buffers.

* linear, in pieces: a linear aggregation whose remote rows came in pieces returns their
  gradients piece by piece;
* linear: gradients through each shard without any source values;
* kept (``sa``): autograd through the shard graphs forward kept;
* max/min (``sar``): each shard refetched, each chunk gets the gradient where it won;
* recompute (``sar``): each shard refetched and recomputed under autograd.

Remote rows' gradients go back to their owners through the runtime's pusher.
"""
from __future__ import annotations

from typing import Optional

import torch

from dsgraph.sar.shard import compute, grads_of, leaves, linear_grads
from dsgraph.seqagg import kernels


class ShardBackward:
    """One ``ShardOp`` backward (``ctx``: its forward's context; ``gout``: the incoming
    gradient). :meth:`run` picks the strategy and returns the op's input gradients."""

    def __init__(self, ctx, gout: torch.Tensor) -> None:
        self.ctx, self.rt, self.spec = ctx, ctx.rt, ctx.spec
        plan = self.plan = ctx.rt.plan
        self.u, self.v, self.e = ctx.saved_tensors
        self.need_u, self.need_v, self.need_e = ctx.needs
        spec = self.spec
        # copy_u + mean divides per edge inside each shard's transposed SpMM (see
        # linear_grads): no node-sized copy of gout / degree stays alive through backward.
        per_edge_mean = ctx.linear and spec.kind == "spmm" and spec.reduce == "mean" \
            and spec.op == "copy_lhs"
        if spec.kind == "spmm" and spec.reduce == "mean" and not per_edge_mean:
            deg = plan.in_degrees.view((-1,) + (1,) * (gout.dim() - 1))
            gout = gout / deg.clamp(min=1).to(gout.dtype)
        self.gout = gout
        # Gradient buffers are taken over from the local shard (processed first) when it
        # already covers them, so no zero-filled copy of u or e stays alive beside it.
        self.gu: Optional[torch.Tensor] = None
        self.gv = torch.zeros_like(self.v) if self.need_v else None
        self.ge: Optional[torch.Tensor] = None
        # a linear aggregation returns its remote gradients in pieces when transfers go in
        # pieces (its forward fetched them so); the other paths fetch whole parts again
        self.pieces = ctx.linear and self.rt.piecewise and spec.kind == "spmm"
        self.push = self.rt.pusher(None, tuple(self.u.shape[1:]), self.u.dtype, self.pieces) \
            if self.need_u and plan.world > 1 else None

    def run(self) -> tuple:
        """The strategy for this op, then the gradients of ``ShardOp.forward``'s inputs."""
        ctx = self.ctx
        if self.pieces:
            self._linear_pieces()
        elif ctx.linear:
            self._linear()
        elif ctx.kept is not None:
            self._kept()
        elif ctx.first_chunk is not None and ctx.winner is not None:
            self._minmax()
        else:
            self._recompute()
        if self.push is not None:
            self.push.finish()
        ctx.winner = None
        if self.need_e and self.ge is None:
            self.ge = torch.zeros_like(self.e)
        return None, None, self.gu, self.gv, self.ge

    # --- shared -------------------------------------------------------------------------------

    def _order(self) -> list[int]:
        """Parts in ring order, the local one first."""
        plan = self.plan
        return [(plan.rank - r) % plan.world for r in range(plan.world)]

    def _shard_grad(self, j: int) -> torch.Tensor:
        """The part of ``gout`` shard ``j`` answers for."""
        if self.spec.kind == "sddmm":
            return self.plan.edge_slice(self.gout, j)
        if self.ctx.winner is not None:
            return self.gout.masked_fill(self.ctx.winner != j, 0.0)
        return self.gout

    def _deliver(self, j: int, gu, gv, ge) -> None:
        """Take shard ``j``'s gradients: v and e into the buffers, u's to the owner."""
        plan = self.plan
        if gv is not None:
            self.gv.add_(gv)
        if self.need_e:
            if self.ge is None:
                whole = ge is not None and ge.shape[0] == plan.num_edges
                self.ge = ge if whole else torch.zeros_like(self.e)
                if whole:
                    ge = None
            if ge is not None:
                plan.edge_slice(self.ge, j).copy_(ge)
        if j == plan.rank:
            if self.need_u:
                u = self.u
                self.gu = gu if gu is not None and gu.shape == u.shape and gu.is_contiguous() \
                    else torch.zeros_like(u) + (0 if gu is None else gu)
                if self.push is not None:
                    self.push.grad_x = self.gu
        elif self.push is not None:
            self.push.push(j, 0, gu)

    def _linear_of(self, j: int, *needs: bool, rows: Optional[tuple[int, int]] = None):
        return linear_grads(self.spec, self.plan, j, self._shard_grad(j), self.ctx.u_shape,
                            self.v, self.plan.edge_slice(self.e, j), *needs,
                            self.rt.chunk_rows, rows)

    # --- the strategies -----------------------------------------------------------------------

    def _linear_pieces(self) -> None:
        """The local part whole, then each remote part's gradient piece by piece, each returned
        to its owner as it is computed."""
        plan, j = self.plan, self.plan.rank
        self._deliver(j, *self._linear_of(j, self.need_u, self.need_v, self.need_e))
        for p in plan.pieces(self.rt.chunk_rows) if self.push is not None else ():
            gu = None
            if p.rows[1] > p.rows[0] and plan.shard_has_edges(p.src):
                gu = self._linear_of(p.src, True, False, False, rows=p.rows)[0]
            self.push.push(p.src, p.rows[0], gu)
            del gu

    def _linear(self) -> None:
        """Gradients through each shard without source values, whole parts."""
        plan = self.plan
        for j in self._order():
            if j != plan.rank and not plan.shard_has_edges(j):
                self._deliver(j, None, None, None)
                continue
            self._deliver(j, *self._linear_of(j, self.need_u, self.need_v, self.need_e))

    def _kept(self) -> None:
        """``sa``: reuse the forward's shard graphs, in ring order, empty shards included:
        every worker pushes round 1, 2, ... in turn."""
        kept = {j: (inputs, p) for j, inputs, p in self.ctx.kept}
        self.ctx.kept = None
        for j in self._order():
            if j in kept:
                inputs, p = kept.pop(j)
                self._deliver(j, *grads_of(p, inputs, self._shard_grad(j), self.ctx.needs))
                del inputs, p
            else:
                self._deliver(j, None, None, None)

    def _minmax(self) -> None:
        """``sar`` max/min: refetch each shard; each chunk gets the gradient where it won."""
        ctx, plan, spec = self.ctx, self.plan, self.spec
        for j, uj in self.rt.fetch(self.u):
            if j not in ctx.first_chunk:
                self._deliver(j, None, None, None)
                continue
            ej = plan.edge_slice(self.e, j)
            gu, ge = kernels.spmm_minmax_grad(plan.group(j), spec.op, spec.reduce, uj, ej,
                                              self.gout, ctx.winner, ctx.first_chunk[j],
                                              self.rt.chunk_rows, self.need_e)
            del uj
            self._deliver(j, gu if self.need_u else None, None, ge)
            del gu, ge

    def _recompute(self) -> None:
        """``sar``: refetch each shard's rows and recompute it under autograd (replaying the
        forward's RNG state)."""
        ctx, plan = self.ctx, self.plan
        with torch.random.fork_rng(devices=[]):
            for j, uj in self.rt.fetch(self.u):
                if j != plan.rank and not plan.shard_has_edges(j):
                    self._deliver(j, None, None, None)
                    continue
                torch.set_rng_state(ctx.rng)
                inputs = leaves(uj, self.v, plan.edge_slice(self.e, j), ctx.needs)
                del uj
                with torch.enable_grad():
                    p = compute(self.spec, plan.shard(j), *inputs)
                self._deliver(j, *grads_of(p, inputs, self._shard_grad(j), ctx.needs))
                del p, inputs
