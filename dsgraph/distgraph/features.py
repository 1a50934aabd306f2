"""Feature reads for sampled training, with rows owned by other partitions cached in the trainer.

A trainer's mini-batch inputs are mostly its own partition's nodes (served from shared memory)
and the partition's halo, the neighbours owned elsewhere. Features are read-only during training,
so remote rows can be pulled once, in bulk, and served locally ever after: the halo's rows
(``sampled.cache_halo``) and, within a memory budget (``sampled.remote_cache_mb``), the other
partitions' nodes with the most out-edges, the ones a neighbour sampler draws most often. Only
rows outside the cache travel over RPC during training.

With ``copy_own`` (``sampled.copy_own_features``) the trainer also copies its partition's rows
out of shared memory, in front of the cache, so one ``index_select`` on one table gathers a
whole batch instead of two gathers merged into the output (``benchmarks/reports/sampled.md``,
row "own rows not copied"). It costs the partition's feature bytes once more per trainer.
"""
from __future__ import annotations

from typing import Optional

import dgl
import torch

# Remote nodes whose out-degree one RPC asks for (bounds the transient id and degree tensors).
_DEGREE_CHUNK = 1 << 20


class CachedFeatures:
    """Read rows of a DistGraph node tensor; rows owned elsewhere come from a local cache when
    it holds them (the halo's, then the most-connected remote nodes' within ``budget_mb``)."""

    def __init__(self, g, name: str = "feat", cache_halo: bool = True,
                 budget_mb: float = 0.0, copy_own: bool = False) -> None:
        self.tensor = g.ndata[name]
        self.pb = g.get_partition_book()
        self.partid = self.pb.partid
        self.remote_rows = 0  # rows that went over RPC (cache misses), for metrics
        self.cache_hits = 0  # rows owned elsewhere but served from the cache
        # This machine's partition of the tensor (shared memory): its rows are gathered here
        # directly instead of through the key-value store's pull (request objects per call).
        self.policy = self.tensor.part_policy
        try:
            self.own_rows = self.tensor.local_partition
        except (KeyError, AttributeError):  # no server of this partition on this machine
            self.own_rows = None
        local = g.local_partition
        halo = torch.empty(0, dtype=torch.int64)
        if cache_halo and local is not None:
            halo, _ = torch.sort(local.ndata[dgl.NID][local.ndata["inner_node"] == 0])
        extra = self._most_connected(g, halo, int(budget_mb * 2**20) // self.row_bytes)
        self.cache_ids, _ = torch.sort(torch.cat([halo, extra]))
        self.cache = self.tensor[self.cache_ids] if self.cache_ids.numel() else None
        # One table: own rows (at their shared-memory positions), then the cache.
        self.table = self.local_rows = None
        if copy_own and self.own_rows is not None:
            parts = [self.own_rows] + ([self.cache] if self.cache is not None else [])
            self.table = torch.cat(parts)
            self.cache = None  # its rows live in the table now
            if local is not None:
                self.local_rows = self._rows_of_partition(local)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        width = int(self.tensor.shape[1]) if len(self.tensor.shape) > 1 else 1
        return width * torch.empty((), dtype=self.tensor.dtype).element_size()

    @property
    def cached_rows(self) -> int:
        """Rows owned by other partitions that this reader serves locally."""
        return int(self.cache_ids.numel())

    def _most_connected(self, g, halo: torch.Tensor, rows: int) -> torch.Tensor:
        """Up to ``rows`` node ids owned by other partitions and not in ``halo``, highest global
        out-degree first (every one of them when all fit: no degree is asked for then)."""
        if rows <= 0:
            return torch.empty(0, dtype=torch.int64)
        best_ids = torch.empty(0, dtype=torch.int64)
        best_deg = torch.empty(0, dtype=torch.int64)
        chunks = [self._remote_ids(p) for p in range(self.pb.num_partitions())
                  if p != self.partid]
        total = sum(int(c.numel()) for c in chunks)
        every = total - int(halo.numel()) <= rows
        for ids in chunks:
            for start in range(0, ids.numel(), _DEGREE_CHUNK):
                part = ids[start:start + _DEGREE_CHUNK]
                if halo.numel():
                    pos = torch.searchsorted(halo, part).clamp_(max=halo.numel() - 1)
                    part = part[halo[pos] != part]
                if every:
                    best_ids = torch.cat([best_ids, part])
                    continue
                deg = g.out_degrees(part).to(torch.int64)
                best_ids, best_deg = torch.cat([best_ids, part]), torch.cat([best_deg, deg])
                if best_ids.numel() > rows:
                    keep = torch.topk(best_deg, rows, sorted=False).indices
                    best_ids, best_deg = best_ids[keep], best_deg[keep]
        return best_ids

    def _rows_of_partition(self, local) -> Optional[torch.Tensor]:
        """For each local id of the partition graph ``local``, its row in :attr:`table` (None
        unless every one of its nodes is owned or cached)."""
        nid = local.ndata[dgl.NID].to(torch.int64)
        inner = local.ndata["inner_node"] != 0
        rows = torch.empty_like(nid)
        rows[inner] = self.policy.to_local(nid[inner])
        pos, hit = self._cached(nid[~inner])
        if hit is not None and not bool(hit.all()):  # a halo row not cached
            return None
        rows[~inner] = self.own_rows.shape[0] + pos
        return rows

    def _remote_ids(self, partid: int) -> torch.Tensor:
        """Global ids of the nodes partition ``partid`` owns."""
        return self.pb.partid2nids(partid).to(torch.int64)

    def _own(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of ids this machine's partition owns."""
        if self.own_rows is None:
            return self.tensor[ids]
        return self.own_rows.index_select(0, self.policy.to_local(ids))

    def _cached(self, ids: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Positions in the cache of ``ids`` and a mask of those it holds (None: all)."""
        n = self.cache_ids.numel()
        if not n:
            return torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
        pos = torch.searchsorted(self.cache_ids, ids).clamp_(max=n - 1)
        hit = self.cache_ids[pos] == ids
        return pos, None if bool(hit.all()) else hit

    def by_local_id(self, ids: torch.Tensor, lids: Optional[torch.Tensor]) -> torch.Tensor:
        """Rows of global ids ``ids`` whose local ids in the partition graph are ``lids`` (None:
        not known): one gather from the table when it maps the partition graph."""
        if lids is None or self.local_rows is None:
            return self[ids]
        rows = self.local_rows.index_select(0, lids.to(torch.int64))
        self.cache_hits += int((rows >= self.own_rows.shape[0]).sum())
        return self.table.index_select(0, rows)

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (global node ids), exactly what ``g.ndata[name][ids]`` returns."""
        remote = self.pb.nid2partid(ids) != self.partid
        if not bool(remote.any()):
            return self._own(ids)
        if self.table is not None:
            return self._from_table(ids, remote)
        out = torch.empty((ids.numel(), *self.tensor.shape[1:]), dtype=self.tensor.dtype)
        lpos = (~remote).nonzero().squeeze(1)
        if lpos.numel():
            out.index_copy_(0, lpos, self._own(ids.index_select(0, lpos)))
        rpos = remote.nonzero().squeeze(1)
        rids = ids.index_select(0, rpos)
        pos, hit = self._cached(rids)
        self._tally(rids.numel(), hit)
        if hit is None:  # the common case: every remote row cached, no miss to sort out
            out.index_copy_(0, rpos, self.cache.index_select(0, pos))
            return out
        if bool(hit.any()):
            out.index_copy_(0, rpos[hit], self.cache.index_select(0, pos[hit]))
        miss = ~hit
        out.index_copy_(0, rpos[miss], self.tensor[rids[miss]])
        return out

    def _from_table(self, ids: torch.Tensor, remote: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` gathered from the one table; misses pulled over RPC and put in place."""
        rows = torch.empty_like(ids)
        own = ~remote
        rows[own] = self.policy.to_local(ids[own])
        rpos = remote.nonzero().squeeze(1)
        rids = ids.index_select(0, rpos)
        pos, hit = self._cached(rids)
        rows[rpos] = pos + self.own_rows.shape[0]
        self._tally(rids.numel(), hit)
        if hit is None:
            return self.table.index_select(0, rows)
        miss = rpos[~hit]
        rows[miss] = 0  # any row: overwritten by the pulled one below
        out = self.table.index_select(0, rows)
        out.index_copy_(0, miss, self.tensor[ids.index_select(0, miss)])
        return out

    def _tally(self, asked: int, hit: Optional[torch.Tensor]) -> None:
        """Count ``asked`` rows owned elsewhere as cache hits or misses (``hit`` None: all hit)."""
        n_hit = int(asked) if hit is None else int(hit.sum())
        self.cache_hits += n_hit
        self.remote_rows += int(asked) - n_hit
