"""Neighbour sampling from the trainer's own partition graph, halo included
(``sampled.local_sampling``).

DGL's distributed ``sample_neighbors`` samples only the partition's owned nodes locally and sends
every other frontier node to its owner over RPC, although the partition graph the trainer already
maps from shared memory (``g.local_partition``) may store a halo node's whole in-neighbourhood
(with ``partition.halo_hops: 2``, every 1-hop halo node's). Sampling such a node from the local
copy draws from the same set of in-edges with the same kernel (``dgl.sampling.sample_neighbors``:
uniform without replacement, every edge when the degree is at most the fanout), so the
distribution equals DGL's ``NeighborSampler``; only the nodes whose in-edges the partition lacks
still go over RPC, through DGL's own distributed ``sample_neighbors``. Completeness is decided
once, at load: a halo node is complete when its stored in-degree equals its global in-degree
(the stored in-edges are a subset of the global ones, so equal counts mean equal sets).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import dgl
import torch
from dgl.dataloading import NeighborSampler

from dsgraph.phases import phase

# srcdata key of the input nodes' local ids on a batch sampled wholly in the partition.
LOCAL_ID = "_local_id"


@dataclass
class LocalIndex:
    """The frontier nodes the trainer's partition graph can sample exactly: its owned nodes and
    the halo nodes whose every in-edge it stores (``halo_ids`` sorted, ``halo_lids`` their local
    ids in ``g.local_partition``)."""

    partid: int
    halo_ids: torch.Tensor
    halo_lids: torch.Tensor
    halo_nodes: int  # every halo node the partition stores, complete or not (for the report)
    complete: Optional[torch.Tensor] = None  # by local id: the node's in-edges are all stored

    @classmethod
    def build(cls, g) -> Optional["LocalIndex"]:
        """The index of DistGraph ``g``'s local partition (None when it has none in this process);
        one in-degree RPC per remote owner."""
        lg = g.local_partition
        if lg is None:
            return None
        halo_lids = torch.nonzero(lg.ndata["inner_node"] == 0).squeeze(1).to(lg.idtype)
        halo_ids = lg.ndata[dgl.NID][halo_lids]
        stored = lg.in_degrees(halo_lids)
        full = g.in_degrees(halo_ids) if halo_ids.numel() else stored
        keep = stored == full
        ids, order = torch.sort(halo_ids[keep])
        complete = lg.ndata["inner_node"] != 0
        complete[halo_lids[keep].long()] = True
        return cls(int(g.get_partition_book().partid), ids, halo_lids[keep][order],
                   int(halo_ids.numel()), complete)

    def split(self, pb, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For global ids ``nodes``: a mask of those sampled locally and their local ids."""
        own = pb.nid2partid(nodes) == self.partid
        lids = torch.empty_like(nodes)
        if bool(own.any()):
            lids[own] = pb.nid2localnid(nodes[own], self.partid)
        local = own.clone()
        other = (~own).nonzero().squeeze(1)
        if other.numel() and self.halo_ids.numel():
            ask = nodes[other]
            pos = torch.searchsorted(self.halo_ids, ask).clamp_(max=self.halo_ids.numel() - 1)
            hit = self.halo_ids[pos] == ask
            local[other[hit]] = True
            lids[other[hit]] = self.halo_lids[pos[hit]]
        return local, lids


def local_frontier(g, index: LocalIndex, nodes: torch.Tensor, fanout: int) -> dgl.DGLGraph:
    """Sampled in-edges of ``nodes`` (global ids) over all of ``g``'s node ids, edge ids in
    ``edata[dgl.EID]``: what ``g.sample_neighbors(nodes, fanout)`` returns, with every node
    ``index`` covers sampled from the local partition graph and only the rest over RPC."""
    pb = g.get_partition_book()
    local, lids = index.split(pb, nodes)
    parts = []  # (src, dst, eid) in global ids; local first, as DGL merges them
    if bool(local.any()):
        lg = g.local_partition
        # The call DGL's own local path makes (graph_services._sample_neighbors_dgl):
        # _dist_training keeps only the induced edge ids instead of copying feature frames.
        sg = dgl.sampling.sample_neighbors(lg, lids[local].to(lg.idtype), fanout,
                                           _dist_training=True)
        s, d = sg.edges()
        nid = lg.ndata[dgl.NID]
        parts.append((nid[s], nid[d], lg.edata[dgl.EID][sg.edata[dgl.EID]]))
    remote = nodes[~local]
    if remote.numel():  # DGL's own path: one request per owner
        fr = dgl.distributed.sample_neighbors(g, remote, fanout)
        parts.append((*fr.edges(), fr.edata[dgl.EID]))
    if not parts:
        empty = torch.empty(0, dtype=nodes.dtype)
        parts.append((empty, empty, empty))
    src, dst, eid = (torch.cat(t) for t in zip(*parts))
    fr = dgl.graph((src, dst), num_nodes=g.num_nodes())
    fr.edata[dgl.EID] = eid
    return fr


class LocalHaloSampler(NeighborSampler):
    """DGL's ``NeighborSampler`` (uniform, without replacement) that samples from the trainer's
    partition graph wherever it can.

    While every node of a layer's frontier is one the partition stores completely, the layer is
    sampled and made a block in one step in the partition's own id space (DGL's fused in-process
    kernel, the one ``NeighborSampler`` uses on a local graph), then relabelled to global ids.
    From the first layer whose frontier is not, the rest of the batch comes from
    :func:`local_frontier` (local where possible, RPC for the rest) and ``dgl.to_block``, as
    DGL's non-fused path builds blocks. The switch depends only on the frontier already drawn,
    never on a redraw, so every layer's draw keeps DGL's distribution. When every layer was
    sampled in the partition, the input block's ``srcdata[LOCAL_ID]`` holds the input nodes'
    local ids, for feature reads that skip the global-to-local lookup
    (:meth:`~dsgraph.distgraph.features.CachedFeatures.by_local_id`); the reader pops it.
    """

    def __init__(self, fanouts: list[int], index: LocalIndex) -> None:
        super().__init__(fanouts)
        self.index = index
        self._structure = None  # the partition graph without its data frames
        self._mapping: dict = {}  # the fused kernel's id map, allocated once and reused

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        """Input nodes, output nodes and one block per fanout (input layer first)."""
        if exclude_eids is not None:
            raise ValueError("LocalHaloSampler does not exclude edges")
        output_nodes, blocks = seed_nodes, []
        local, lids = self.index.split(g.get_partition_book(), seed_nodes)
        in_partition = self.index.complete is not None and bool(local.all())
        for fanout in reversed(self.fanouts):
            if in_partition and bool(self.index.complete[lids].all()):
                block = self._fused_block(g.local_partition, lids, fanout)
                lids = block.srcdata.pop(LOCAL_ID)
            else:
                in_partition = False
                frontier = local_frontier(g, self.index, seed_nodes, fanout)
                with phase("block"):
                    block = dgl.to_block(frontier, seed_nodes)
                block.edata[dgl.EID] = frontier.edata[dgl.EID]
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        if in_partition:
            blocks[0].srcdata[LOCAL_ID] = lids
        return seed_nodes, output_nodes, blocks

    def _fused_block(self, lg, lids: torch.Tensor, fanout: int) -> dgl.DGLGraph:
        """The block of ``lids``' sampled in-edges (local ids of completely stored nodes),
        relabelled to global node and edge ids; its sources' local ids in ``srcdata[LOCAL_ID]``."""
        if self._structure is None:
            # The same shared graph index, without the frames: the fused kernel would copy
            # every node and edge column into each block.
            self._structure = dgl.DGLGraph(lg._graph, lg.ntypes, lg.etypes)
        block = dgl.sampling.sample_neighbors_fused(self._structure, lids.to(lg.idtype), fanout,
                                                    mapping=self._mapping)
        nid = lg.ndata[dgl.NID]
        src = block.srcdata[dgl.NID]
        block.srcdata[LOCAL_ID] = src
        block.srcdata[dgl.NID] = nid[src]
        block.dstdata[dgl.NID] = nid[block.dstdata[dgl.NID]]
        block.edata[dgl.EID] = lg.edata[dgl.EID][block.edata[dgl.EID]]
        return block


class SampleCounter:
    """Per-epoch counts of where each block's destination nodes were sampled: locally, or over
    RPC (and how many requests: one per remote owner per block, as DGL sends them). Computed
    from the blocks, so it also covers sampler processes and DGL's default sampler."""

    def __init__(self, g, index: Optional[LocalIndex]) -> None:
        self.pb = g.get_partition_book()
        has_local = g.local_partition is not None
        # Without local sampling DGL samples exactly the owned nodes locally.
        self.index = index if index is not None else LocalIndex(
            int(self.pb.partid) if has_local else -1,
            torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64), 0)
        self.reset()

    def reset(self) -> None:
        """Zero the counts (at the start of an epoch)."""
        self.local_nodes = self.remote_nodes = self.requests = 0

    def add(self, blocks: list, all_local: bool = False) -> None:
        """Count one mini-batch's blocks (``all_local``: the sampler says every layer was
        sampled in the partition, so no lookup is needed)."""
        if all_local:
            self.local_nodes += sum(block.num_dst_nodes() for block in blocks)
            return
        for block in blocks:
            dst = block.dstdata[dgl.NID]
            local, _ = self.index.split(self.pb, dst)
            remote = dst[~local]
            self.local_nodes += int(local.sum())
            self.remote_nodes += int(remote.numel())
            if remote.numel():
                self.requests += int(torch.unique(self.pb.nid2partid(remote)).numel())
