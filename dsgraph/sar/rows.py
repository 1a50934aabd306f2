"""Rows of a node tensor by global id, wherever their owner is: a differentiable fetch.

A worker holds the rows of its own nodes (global ids ``[ranges[rank], ranges[rank + 1])``).
:class:`RowPlan` asks every owner, once, for the distinct ids a worker needs (one exchange of
counts, one of id lists); :func:`fetch_rows` then moves those rows in one all-to-all, and its
backward sends each fetched row's gradient (summed over the row's uses) back to the owner, which
adds it into its own rows' gradient. Every worker calls both in the same order (collectives),
with an empty request where it needs nothing.
"""
from __future__ import annotations

from typing import Optional

import torch

from dsgraph import dist
from dsgraph.sar.comm import Comm


def exchange(send: dict[int, torch.Tensor], rank: int, world: int) -> dict[int, torch.Tensor]:
    """Send ``send[q]`` (rows of one shape and dtype) to each other rank q and receive what each
    sends this rank, whose counts are not known in advance (one exchange of counts first)."""
    like = next(iter(send.values()))
    row_shape, dtype = tuple(like.shape[1:]), like.dtype
    peers = [q for q in range(world) if q != rank]
    counts = torch.tensor([[len(send[q])] for q in peers], dtype=torch.int64)
    got = dist.exchange_rows({q: counts[i] for i, q in enumerate(peers)},
                             {q: 1 for q in peers}, (1,), torch.int64)
    return dist.exchange_rows({q: send[q] for q in peers if len(send[q])},
                              {q: int(got[q]) for q in peers}, row_shape, dtype)


class RowPlan:
    """Which rows this worker reads from every owner for a list of global ids (collective)."""

    def __init__(self, ids: torch.Tensor, ranges: torch.Tensor, comm: Comm) -> None:
        self.rank, self.world, self.comm = comm.rank, comm.world, comm
        uniq, self.index = torch.unique(ids.to(torch.int64), return_inverse=True)
        # ids of one owner are one contiguous range, so sorted ids come grouped by owner in
        # rank order: the fetched table is the owners' rows concatenated
        owner = torch.bucketize(uniq, ranges[1:], right=True)
        self.counts = torch.bincount(owner, minlength=self.world).tolist()
        wanted = [rows - ranges[q] for q, rows in enumerate(uniq.split(self.counts))]
        self.own = wanted[self.rank]  # local rows of this worker's own ids
        self.want = {q: wanted[q] for q in range(self.world) if q != self.rank}
        # local rows each peer reads from this worker, in its table's order
        self.serve = exchange(self.want, self.rank, self.world) if self.world > 1 else {}

    @property
    def num_rows(self) -> int:
        """Distinct ids: the rows of the fetched table."""
        return sum(self.counts)


class _Fetch(torch.autograd.Function):
    """Local rows -> the plan's table of distinct rows (own and fetched), owner-ordered."""

    @staticmethod
    def forward(ctx, plan: RowPlan, x: torch.Tensor) -> torch.Tensor:
        ctx.plan, ctx.num_local = plan, x.shape[0]
        if plan.world == 1:
            return x.index_select(0, plan.own)
        send = {q: x.index_select(0, rows) for q, rows in plan.serve.items() if rows.numel()}
        plan.comm.bytes_sent += sum(t.numel() * t.element_size() for t in send.values())
        got = dist.exchange_rows(send, {q: len(r) for q, r in plan.want.items()},
                                 x.shape[1:], x.dtype)
        del send
        parts = [x.index_select(0, plan.own) if q == plan.rank else got[q]
                 for q in range(plan.world)]
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[None, Optional[torch.Tensor]]:
        plan = ctx.plan
        out = grad.new_zeros((ctx.num_local,) + tuple(grad.shape[1:]))
        parts = grad.split(plan.counts)
        out.index_add_(0, plan.own, parts[plan.rank])
        if plan.world > 1:
            send = {q: parts[q].contiguous() for q in plan.want if plan.counts[q]}
            plan.comm.bytes_sent += sum(t.numel() * t.element_size() for t in send.values())
            got = dist.exchange_rows(send, {q: len(r) for q, r in plan.serve.items()},
                                     grad.shape[1:], grad.dtype)
            del send, parts
            for q, rows in plan.serve.items():
                if rows.numel():
                    out.index_add_(0, rows, got[q])
        return None, out


def fetch_rows(x: torch.Tensor, plan: RowPlan) -> torch.Tensor:
    """Row ``i`` is the row of global id ``ids[i]`` (the plan's) of ``x``, the workers' own rows
    (collective; differentiable: gradients go back to the owners' ``x``)."""
    return _Fetch.apply(plan, x)[plan.index]
