"""Feature reads for sampled training with the partition's halo rows cached in the trainer.

A trainer's mini-batch inputs are mostly its own partition's nodes (served from shared memory)
and the partition's halo, the neighbours owned elsewhere. Features are read-only during training,
so the halo rows are pulled once, in bulk, and every later read of them is a local lookup; only
rows beyond the halo still travel over RPC.
"""
from __future__ import annotations

import dgl
import torch


class HaloCachedFeatures:
    """Read rows of a DistGraph node-feature tensor, serving halo rows from a local copy."""

    def __init__(self, g, name: str = "feat", cache_halo: bool = True) -> None:
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
        if cache_halo and local is not None:
            halo = local.ndata[dgl.NID][local.ndata["inner_node"] == 0]
            self.cache_ids, _ = torch.sort(halo)
            self.cache = self.tensor[self.cache_ids]
        else:
            self.cache_ids = torch.empty(0, dtype=torch.int64)
            self.cache = None

    @property
    def row_bytes(self) -> int:
        """Bytes of one feature row."""
        return int(self.tensor.shape[1]) * torch.empty((), dtype=self.tensor.dtype).element_size()

    def _own(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of ids this machine's partition owns."""
        if self.own_rows is None:
            return self.tensor[ids]
        return self.own_rows.index_select(0, self.policy.to_local(ids))

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (global node ids), exactly what ``g.ndata[name][ids]`` returns."""
        remote = self.pb.nid2partid(ids) != self.partid
        if not bool(remote.any()):
            return self._own(ids)
        if self.cache is None:
            self.remote_rows += int(remote.sum())
            return self.tensor[ids]
        out = torch.empty((ids.numel(), self.tensor.shape[1]), dtype=self.tensor.dtype)
        lpos = (~remote).nonzero().squeeze(1)
        if lpos.numel():
            out.index_copy_(0, lpos, self._own(ids.index_select(0, lpos)))
        rpos = remote.nonzero().squeeze(1)
        rids = ids.index_select(0, rpos)
        pos = torch.searchsorted(self.cache_ids, rids).clamp_(max=max(self.cache_ids.numel() - 1, 0))
        hit = self.cache_ids[pos] == rids if self.cache_ids.numel() else torch.zeros_like(rids, dtype=torch.bool)
        n_hit = int(hit.sum())
        if n_hit == rids.numel():  # the common case with the halo cached: no miss to sort out
            out.index_copy_(0, rpos, self.cache.index_select(0, pos))
        else:
            out.index_copy_(0, rpos[hit], self.cache.index_select(0, pos[hit]))
            miss = ~hit
            out.index_copy_(0, rpos[miss], self.tensor[rids[miss]])
            self.remote_rows += int(miss.sum())
        self.cache_hits += n_hit
        return out
