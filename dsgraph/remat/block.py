"""``RematBlock``: a sampled block planned as groups of source rows, pulled and aggregated one
group at a time."""
from __future__ import annotations

from typing import Any, Callable, Optional

import dgl
import torch

from dsgraph.remat.rows import RowSource
from dsgraph.seqagg.chunks import GroupGraph


class Group:
    """Source rows of one owning partition (all, or a chunk of them) and their edges."""

    __slots__ = ("part", "rows", "ids", "graph", "first_chunk")

    def __init__(self, part: int, rows: torch.Tensor, ids: torch.Tensor, graph: GroupGraph) -> None:
        self.part, self.rows, self.ids, self.graph = part, rows, ids, graph
        self.first_chunk = 0


class RematBlock:
    """A sampled block whose source rows are pulled and aggregated one group at a time: the rows
    of one owning partition (the trainer's own first), cut into groups of at most
    ``chunk_rows`` rows (0: one group per partition). ``owner(ids)`` gives the partition of
    global ids.

    With ``source`` None the rows are the layer's input (a later layer, fed the previous
    layer's output): the groups are consecutive runs of ``chunk_rows`` rows by position."""

    def __init__(self, block, source: Optional[RowSource],
                 owner: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 own_part: int = 0, chunk_rows: int = 0, compression: Any = None,
                 width: Optional[int] = None, dtype: Optional[torch.dtype] = None) -> None:
        self.block, self.source, self.chunk_rows = block, source, chunk_rows
        self.compression = compression
        self.num_src, self.num_dst = block.num_src_nodes(), block.num_dst_nodes()
        self.num_edges = block.num_edges()
        if source is None:  # rows by position: a DGL block's destinations are its first sources
            self.src_ids, self.dst_ids = torch.arange(self.num_src), torch.arange(self.num_dst)
            owner = None
        else:
            self.src_ids = block.srcdata[dgl.NID]
            self.dst_ids = block.dstdata[dgl.NID]
        self.in_deg = block.in_degrees()
        # out-edges of every source row, contiguous per row: a group's edges are its rows'
        # segments, gathered without sorting the block's edges
        indptr, dst, _ = block.adj_tensors("csr")
        indptr, dst = indptr.long(), dst.long()
        self.out_deg = indptr[1:] - indptr[:-1]
        part = owner(self.src_ids).long() if owner is not None else \
            torch.full((self.num_src,), own_part, dtype=torch.int64)
        parts = torch.unique(part).tolist()
        order = [own_part] * (own_part in parts) + [p for p in parts if p != own_part]
        self.groups: list[Group] = []
        for p in order:
            rows = (part == p).nonzero().squeeze(1)
            # Groups of at most chunk_rows rows: one is pulled, projected and folded at a time,
            # so the largest partition's share of the batch is never alive at once.
            step = chunk_rows if chunk_rows > 0 else max(rows.numel(), 1)
            for a in range(0, rows.numel(), step):
                piece = rows[a:a + step]
                count = self.out_deg[piece]
                n = int(count.sum())
                if n == 0:
                    continue  # these rows reach no destination: never pulled
                first = torch.cumsum(count, 0) - count  # each row's first edge in the group
                edges = torch.repeat_interleave(indptr[piece] - first, count) + torch.arange(n)
                src = torch.repeat_interleave(torch.arange(piece.numel()), count)
                self.groups.append(Group(p, piece, self.src_ids[piece],
                                         GroupGraph(src, dst[edges], piece.numel(), self.num_dst,
                                                    cache=False)))
        self.width, self.dtype = width, dtype

    def placeholder(self, width: int, dtype: torch.dtype) -> torch.Tensor:
        """What the model gets as the block's input features: the right shape, no memory."""
        self.width, self.dtype = width, dtype
        return torch.zeros((), dtype=dtype).expand(self.num_src, width)

    def num_dst_nodes(self) -> int:
        """Destination nodes of the block."""
        return self.num_dst

    number_of_dst_nodes = num_dst_nodes

    def num_src_nodes(self) -> int:
        """Source nodes of the block."""
        return self.num_src

    number_of_src_nodes = num_src_nodes
