"""Which remote feature rows a trainer's cache holds (``sampled.feature_cache_policy``).

``frequency``: the rows read most often in mini-batches sampled from the trainer's own seeds
before training (PaGraph and SALIENT++ rank by the same measured access counts): the sampler,
fanouts and seed split that training uses decide, so 2-hop rows that every batch touches come
before 1-hop rows of rarely drawn seeds. Rows the pre-sampled batches never read follow, the
partition's halo first (direct neighbours of its nodes), then any other remote row, as the
budget allows.
``degree``: the 1-hop halo, then other remote nodes by global out-degree (a sampler draws a
node in proportion to its out-edges); it needs no pre-sampling, only a degree query per remote
node.
"""
from __future__ import annotations

from typing import Iterable

import dgl
import torch

# Remote nodes whose out-degree one RPC asks for (bounds the transient id and degree tensors).
_DEGREE_CHUNK = 1 << 20


def halo_ids(g) -> torch.Tensor:
    """Global ids of the trainer's partition's 1-hop halo (nodes owned elsewhere that share an
    edge with an own node), sorted, whatever ``partition.halo_hops`` stored.

    A 2-hop part also stores its neighbours' neighbours, read far less often; taking them
    along filled the ``degree`` policy's budget in id order instead of with direct neighbours,
    so training on 2-hop files moved more remote rows than on 1-hop files of the same graph."""
    local = g.local_partition
    if local is None:
        return torch.empty(0, dtype=torch.int64)
    inner = local.ndata["inner_node"].bool()
    src, dst = local.edges()
    # the other end of an edge at an own node is a direct neighbour (stored: in-edges of own
    # nodes and out-edges to the halo)
    ends = torch.cat([src[inner[dst]], dst[inner[src]]])
    ends = ends[~inner[ends]]
    return torch.unique(local.ndata[dgl.NID][ends].to(torch.int64))


def remote_ids(pb) -> torch.Tensor:
    """Global ids of every node owned by another partition than the trainer's."""
    parts = [pb.partid2nids(p).to(torch.int64) for p in range(pb.num_partitions())
             if p != pb.partid]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)


def _append_new(ranked: torch.Tensor, more: torch.Tensor) -> torch.Tensor:
    """``ranked`` followed by the ids of ``more`` it lacks (in ``more``'s order)."""
    if not ranked.numel():
        return more
    seen = torch.sort(ranked)[0]
    pos = torch.searchsorted(seen, more).clamp_(max=seen.numel() - 1)
    return torch.cat([ranked, more[seen[pos] != more]])


def by_frequency(input_nodes: Iterable[torch.Tensor], pb, g, rows: int) -> torch.Tensor:
    """Up to ``rows`` remote node ids, most read first among the batches' ``input_nodes``, then
    the halo's unread ones, then the other remote ids (the budget is filled)."""
    ids = [n[pb.nid2partid(n) != pb.partid].to(torch.int64) for n in input_nodes]
    seen = torch.cat(ids) if ids else torch.empty(0, dtype=torch.int64)
    uniq, counts = torch.unique(seen, return_counts=True)
    # stable: among equal counts the lower id first, so every run picks the same rows
    order = torch.sort(counts, descending=True, stable=True)[1]
    ranked = uniq[order][:rows]
    for more in (halo_ids, lambda _: remote_ids(pb)):  # unread rows: the halo, then the rest
        if ranked.numel() >= rows:
            break
        ranked = _append_new(ranked, more(g))[:rows]
    return ranked


def by_degree(g, pb, rows: int) -> torch.Tensor:
    """Up to ``rows`` remote node ids: the 1-hop halo, then the others by global out-degree."""
    halo = halo_ids(g)[:rows]
    room = rows - halo.numel()
    if room <= 0:
        return halo
    best_ids = best_deg = torch.empty(0, dtype=torch.int64)
    others = remote_ids(pb)
    for start in range(0, others.numel(), _DEGREE_CHUNK):
        part = others[start:start + _DEGREE_CHUNK]
        if halo.numel():
            pos = torch.searchsorted(halo, part).clamp_(max=halo.numel() - 1)
            part = part[halo[pos] != part]
        deg = g.out_degrees(part).to(torch.int64)
        best_ids, best_deg = torch.cat([best_ids, part]), torch.cat([best_deg, deg])
        if best_ids.numel() > room:
            keep = torch.topk(best_deg, room, sorted=False).indices
            best_ids, best_deg = best_ids[keep], best_deg[keep]
    return torch.cat([halo, best_ids[torch.argsort(best_deg, descending=True)]])
