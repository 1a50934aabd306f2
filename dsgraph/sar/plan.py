"""Shards and exchange plan: which rows each worker needs from every other one.

Worker k's in-edges are split by the part that owns their source: shard j holds the edges
from part j into k as a DGL block over the distinct needed rows of j (compact ids) and k's
local nodes, sorted by source row: a :class:`dsgraph.seqagg.chunks.GroupGraph`, which the
sequential-aggregation core processes in chunks of source rows. One exchange of id lists at set-up tells every worker which of its own rows each
peer needs (``send_rows``); global out-degrees are summed the same way.
"""
from __future__ import annotations

from typing import Optional

import dgl
import torch
import torch.distributed as dist

from dsgraph.partition.reader import LocalPartition
from dsgraph.sar.comm import Piece, ring_pieces
from dsgraph.seqagg.chunks import GroupGraph, sort_by_src


def _exchange(rank: int, world: int, sends: list[torch.Tensor], sizes: list[int],
              dtype: torch.dtype) -> list[torch.Tensor]:
    """Send ``sends[j]`` to every peer j and receive ``sizes[j]`` items from each (set-up only)."""
    works, out = [], [torch.empty(0, dtype=dtype) for _ in range(world)]
    for j in range(world):
        if j == rank:
            continue
        if sizes[j] > 0:
            out[j] = torch.empty(sizes[j], dtype=dtype)
            works.append(dist.irecv(out[j], j, tag=7))
        if sends[j].numel() > 0:
            works.append(dist.isend(sends[j].contiguous(), j, tag=7))
    for w in works:
        w.wait()
    return out


class ShardPlan:
    """Per-part shards of one worker's in-edges and the rows exchanged with each peer."""

    def __init__(self, part: LocalPartition) -> None:
        k, n, nl = part.rank, part.num_parts, part.num_local
        self.rank, self.world, self.num_local = k, n, nl
        ranges = part.node_ranges
        owner = torch.bucketize(part.src, ranges[1:], right=True)
        order = torch.argsort(owner, stable=True)  # local edge order: grouped by source part
        src, dst, owner = part.src[order], part.dst[order], owner[order]
        del order
        counts = torch.bincount(owner, minlength=n)
        self.edge_offsets = [0] + torch.cumsum(counts, 0).tolist()
        self.num_edges = self.edge_offsets[-1]
        big = max(nl, part.num_global, self.num_edges) >= 2**31 - 1
        self.idtype = torch.int64 if big else torch.int32
        self.need: list[int] = [0] * n  # rows this worker needs from each part
        self.need_rows: list[torch.Tensor] = [torch.empty(0, dtype=torch.int64)] * n
        self._shard_src: list[torch.Tensor] = []  # compact source id per shard edge
        self._shard_dst: list[torch.Tensor] = []
        self.num_src: list[int] = []
        for j in range(n):
            a, b = self.edge_offsets[j], self.edge_offsets[j + 1]
            s = src[a:b] - ranges[j]
            if j == k:
                compact, nsrc = s, nl
            else:
                uniq, compact = torch.unique(s, return_inverse=True)
                self.need[j], self.need_rows[j], nsrc = uniq.numel(), uniq, uniq.numel()
            compact, d, _ = sort_by_src(compact, dst[a:b])  # chunks of rows = edge slices
            self._shard_src.append(compact.to(self.idtype))
            self._shard_dst.append(d.to(self.idtype))
            self.num_src.append(nsrc)
        del src, dst, owner
        self.halo_offsets = [0] * n  # position of part j's rows in the one-shot halo buffer
        off = 0
        for j in range(n):
            if j != k:
                self.halo_offsets[j] = off
                off += self.need[j]
        self.num_halo = off
        self._groups: dict[int, GroupGraph] = {}
        self._has_in: dict[int, torch.Tensor] = {}
        self._local = None
        self.send_rows: list[torch.Tensor] = [torch.empty(0, dtype=torch.int64)] * n
        self.in_degrees = torch.bincount(torch.cat(self._shard_dst).long(), minlength=nl) \
            if self.num_edges else torch.zeros(nl, dtype=torch.int64)
        self.out_degrees = torch.zeros(nl, dtype=torch.int64)
        self.any_remote = False
        self.need_table: list[list[int]] = [list(self.need)]  # [k][j]: rows k needs from j
        self._pieces: dict[int, list[Piece]] = {}
        self._setup_exchange()

    def _setup_exchange(self) -> None:
        """One exchange of needed-id lists (and out-degree counts) with every peer."""
        k, n = self.rank, self.world
        local_out = torch.bincount(self._shard_src[k].long(), minlength=self.num_local) \
            if self._shard_src[k].numel() else torch.zeros(self.num_local, dtype=torch.int64)
        self.out_degrees += local_out
        if n == 1:
            return
        need = torch.tensor(self.need, dtype=torch.int64)
        table = [torch.empty(n, dtype=torch.int64) for _ in range(n)]
        dist.all_gather(table, need)
        self.need_table = [t.tolist() for t in table]
        sizes = [int(table[j][k]) for j in range(n)]  # rows part j needs from me
        self.any_remote = any(int(t.sum()) > 0 for t in table)
        self.send_rows = _exchange(k, n, self.need_rows, sizes, torch.int64)
        counts = [torch.bincount(self._shard_src[j].long(), minlength=self.need[j])
                  if j != k and self.need[j] else torch.empty(0, dtype=torch.int64)
                  for j in range(n)]
        got = _exchange(k, n, counts, sizes, torch.int64)
        for j in range(n):
            if j != k and got[j].numel():
                self.out_degrees.index_add_(0, self.send_rows[j], got[j])

    def pieces(self, piece_rows: int) -> list[Piece]:
        """This worker's ring exchanges in pieces of at most ``piece_rows`` rows (cached)."""
        got = self._pieces.get(piece_rows)
        if got is None:
            got = self._pieces[piece_rows] = ring_pieces(self.need_table, self.rank, piece_rows)
        return got

    # --- graphs (built lazily: a mode uses either the shards or the whole local block) -----

    def group(self, j: int) -> GroupGraph:
        """Shard j as a group of the sequential-aggregation core (edges sorted by row)."""
        gg = self._groups.get(j)
        if gg is None:
            gg = GroupGraph(self._shard_src[j], self._shard_dst[j], self.num_src[j],
                            self.num_local, self.idtype)
            self._groups[j] = gg
        return gg

    def shard(self, j: int):
        """Block of shard j: compact rows of part j (or local ids for j == rank) -> local nodes."""
        return self.group(j).block(0, self.num_src[j])

    def reverse_shard(self, j: int):
        """Shard j with edges reversed (local nodes -> part j's rows), same edge order."""
        return self.group(j).block(0, self.num_src[j], reverse=True)

    def has_in_edge(self, j: int) -> torch.Tensor:
        """Bool per local node: does shard j have an edge into it (max/min need this)."""
        m = self._has_in.get(j)
        if m is None:
            m = torch.zeros(self.num_local, dtype=torch.bool)
            m[self._shard_dst[j].long()] = True
            self._has_in[j] = m
        return m

    def local_block(self):
        """All local edges in local order: sources are local ids then the halo, by part."""
        if self._local is None:
            srcs = []
            for j in range(self.world):
                s = self._shard_src[j]
                srcs.append(s if j == self.rank else s + (self.num_local + self.halo_offsets[j]))
            self._local = dgl.create_block(
                (torch.cat(srcs), torch.cat(self._shard_dst)),
                num_src_nodes=self.num_local + self.num_halo, num_dst_nodes=self.num_local,
                idtype=self.idtype)
        return self._local

    def materialize(self, mode: str, chunk_rows: int = 0) -> None:
        """Build (with sparse formats) every graph ``mode`` uses now rather than on first use."""
        graphs = [self.local_block()]
        if mode != "one_shot" and self.any_remote:
            for j in range(self.world):
                graphs += [self.shard(j), self.reverse_shard(j)]
                self.group(j).materialize(chunk_rows)
                self.has_in_edge(j)
        for g in graphs:
            g.create_formats_()

    def edge_dst_degree(self, j: int, dtype: torch.dtype) -> torch.Tensor:
        """In-degree (at least 1) of each shard-j edge's destination, as ``dtype`` (mean)."""
        return self.in_degrees.clamp(min=1).to(dtype)[self._shard_dst[j].long()]

    def edge_slice(self, t: Optional[torch.Tensor], j: int) -> Optional[torch.Tensor]:
        """The rows of a local edge tensor that belong to shard j (a view)."""
        if t is None:
            return None
        return t[self.edge_offsets[j]:self.edge_offsets[j + 1]]

    def shard_has_edges(self, j: int) -> bool:
        """Whether shard j has any edge."""
        return self.edge_offsets[j + 1] > self.edge_offsets[j]
