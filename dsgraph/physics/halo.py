"""Per-worker subgraphs (owned + halo nodes) and the autograd-correct halo exchange over gloo.

Every worker holds the same global sampled graph (shared seed), so each can compute the whole
communication plan locally: worker r sends to q, in increasing global id order, exactly those of
its owned nodes that feed an edge into a node q owns; q receives them into its halo rows in the
same order. No metadata is exchanged.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dsgraph.dist import exchange_rows


@dataclass
class LocalPlan:
    """One worker's view of a decomposed graph. Local rows: owned nodes first, then halo."""

    rank: int
    world: int
    owned: np.ndarray  # global node ids owned here (sorted)
    halo: np.ndarray  # global ids of in-neighbours owned elsewhere (sorted)
    edges: np.ndarray  # ids of the global edges whose destination is owned here
    src: np.ndarray  # local source row of each of those edges
    dst: np.ndarray  # local destination row
    send: dict[int, torch.Tensor] = field(default_factory=dict)  # peer -> local rows to send
    recv: dict[int, torch.Tensor] = field(default_factory=dict)  # peer -> local rows to fill
    global_owned: int = 0  # owned nodes summed over all workers (loss normaliser)
    comm_s: float = 0.0  # seconds spent in halo exchanges (waiting for peers included)

    @property
    def nodes(self) -> np.ndarray:
        """Global ids of the local rows (owned, then halo)."""
        return np.concatenate([self.owned, self.halo])

    @property
    def num_owned(self) -> int:
        """Number of owned rows (the first rows of every local tensor)."""
        return len(self.owned)

    def halo_bytes(self, width: int, itemsize: int = 4) -> int:
        """Bytes this worker receives per exchange of ``width``-wide rows."""
        return sum(len(r) for r in self.recv.values()) * width * itemsize


def make_plan(owner: np.ndarray, src: np.ndarray, dst: np.ndarray, rank: int, world: int,
              near: tuple[np.ndarray, np.ndarray] | None = None) -> LocalPlan:
    """The plan of worker ``rank`` for a graph with per-node ``owner`` ids and edges src -> dst.

    Without ``near``, ``src``/``dst`` must be the whole graph: the halo is exactly the foreign
    sources of edges into owned nodes, and what to send to q follows from the edges into q's nodes.
    With ``near`` = (src, dst) of every within-radius pair into the owned nodes (before the edge
    cap), ``src``/``dst`` need only the edges into owned nodes: halo and send lists then cover
    every foreign node within the radius. Both sides derive them from the same symmetric pairs,
    so they agree without metadata, and a few rows travel that no kept edge reads.
    """
    n = len(owner)
    owned = np.flatnonzero(owner == rank)
    edges = np.flatnonzero(owner[dst] == rank)
    if near is None:
        a_src, a_dst = src[edges], dst[edges]
    else:
        k = owner[near[1]] == rank
        a_src, a_dst = near[0][k], near[1][k]
    halo = np.unique(a_src[owner[a_src] != rank])
    local = -np.ones(n, dtype=np.int64)
    local[owned] = np.arange(len(owned))
    local[halo] = len(owned) + np.arange(len(halo))
    plan = LocalPlan(rank=rank, world=world, owned=owned, halo=halo, edges=edges,
                     src=local[src[edges]], dst=local[dst[edges]], global_owned=n)
    if near is None:
        cross = owner[src] != owner[dst]
    for q in range(world):
        if q == rank:
            continue
        if near is None:
            # Rows q needs from me: my nodes that are sources of edges into q's nodes.
            out = np.unique(src[cross & (owner[dst] == q) & (owner[src] == rank)])
        else:
            # My nodes with a node of q within the radius (pairs are symmetric).
            out = np.unique(a_dst[owner[a_src] == q])
        inc = halo[owner[halo] == q]
        if len(out):
            plan.send[q] = torch.from_numpy(local[out])
        if len(inc):
            plan.recv[q] = torch.from_numpy(local[inc])
    return plan


class HaloExchange(torch.autograd.Function):
    """Forward: halo rows <- the owners' current rows. Backward: halo gradients go back to the
    owners and are added into the rows they came from; halo rows get no local gradient."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, plan: LocalPlan) -> torch.Tensor:  # type: ignore[override]
        """Replace the halo rows of ``h`` with the values their owners hold."""
        t0 = time.perf_counter()
        ctx.plan = plan
        out = h.clone()
        payload = {q: h[rows].contiguous() for q, rows in plan.send.items()}
        got = exchange_rows(payload, {q: len(r) for q, r in plan.recv.items()}, h.shape[1:],
                            h.dtype)
        for q, buf in got.items():
            out[plan.recv[q]] = buf
        plan.comm_s += time.perf_counter() - t0
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        """Return halo-row gradients to their owners; add the ones received into owned rows."""
        t0 = time.perf_counter()
        plan: LocalPlan = ctx.plan
        grad = grad.contiguous()
        payload = {q: grad[rows].contiguous() for q, rows in plan.recv.items()}
        got = exchange_rows(payload, {q: len(r) for q, r in plan.send.items()}, grad.shape[1:],
                            grad.dtype)
        out = grad.clone()
        out[plan.num_owned:] = 0  # halo values were overwritten in forward: no local gradient
        for q, buf in got.items():
            out.index_add_(0, plan.send[q], buf)
        plan.comm_s += time.perf_counter() - t0
        return out, None


def exchange(plan: LocalPlan, fn: type[torch.autograd.Function] = HaloExchange):
    """A callable h -> fn.apply(h, plan) for the model's ``exchange`` hook (None when P = 1)."""
    if plan.world == 1:
        return None
    return lambda h: fn.apply(h, plan)
