"""``GroupGraph``: the edges from one group of source rows into the destination nodes, chunked.

Edges are kept sorted by source row, so the edges of source rows ``[a, b)`` are one slice and a
chunk's block is built from slices of two index arrays (and cached: SAR reuses it every step).
"""
from __future__ import annotations

import warnings
from typing import Iterator, Optional

import dgl
import torch


def sort_by_src(src: torch.Tensor, dst: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                 torch.Tensor]:
    """``(src, dst, order)`` with edges stably sorted by source (``order`` maps back)."""
    order = torch.argsort(src, stable=True)
    return src[order], dst[order], order


class GroupGraph:
    """Edges (compact source row -> destination node) of one group, sorted by source row."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int,
                 idtype: torch.dtype = torch.int64, cache: bool = True) -> None:
        if src.numel() > 1 and bool((src[1:] < src[:-1]).any()):
            raise ValueError("GroupGraph edges must be sorted by source row")
        self.src, self.dst = src.to(idtype), dst.to(idtype)
        self.num_src, self.num_dst, self.idtype = num_src, num_dst, idtype
        self.num_edges = int(src.numel())
        # first edge of every source row (num_src + 1 entries): chunk edge ranges are lookups
        self.row_ptr = torch.searchsorted(self.src.long(), torch.arange(num_src + 1))
        # SAR reuses its shards' blocks every step; a sampled group's are used once per pass,
        # and keeping them would hold their sparse formats from forward through backward.
        self._blocks: Optional[dict[tuple, object]] = {} if cache else None

    def bounds(self, chunk_rows: int, lo: int = 0,
               hi: Optional[int] = None) -> list[tuple[int, int]]:
        """Source-row ranges of the chunks of rows ``[lo, hi)`` (default all; one range for
        ``chunk_rows`` 0; none if no edges). A ``lo`` at a multiple of ``chunk_rows`` gives the
        same chunks as the whole group does there (SAR's transfer pieces rely on that)."""
        hi = self.num_src if hi is None else hi
        if self.num_edges == 0 or hi <= lo:
            return []
        step = hi - lo if chunk_rows <= 0 else chunk_rows
        return [(a, min(a + step, hi)) for a in range(lo, hi, step)]

    def edge_range(self, a: int, b: int) -> tuple[int, int]:
        """Edge slice of source rows ``[a, b)``."""
        return int(self.row_ptr[a]), int(self.row_ptr[b])

    def block(self, a: int, b: int, reverse: bool = False):
        """Block of rows ``[a, b)`` (compact ids ``- a``) into every destination node; with
        ``reverse`` its edges point back (destinations -> rows), same edge order."""
        key = (a, b, reverse)
        g = self._blocks.get(key) if self._blocks is not None else None
        if g is None:
            ea, eb = self.edge_range(a, b)
            s, d = self.src[ea:eb] - a, self.dst[ea:eb]
            if reverse:
                g = dgl.create_block((d, s), num_src_nodes=self.num_dst, num_dst_nodes=b - a,
                                     idtype=self.idtype)
            else:
                g = dgl.create_block((s, d), num_src_nodes=b - a, num_dst_nodes=self.num_dst,
                                     idtype=self.idtype)
            if self._blocks is not None:
                self._blocks[key] = g
        return g

    def matrix(self, a: int, b: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``[a, b)``'s edges as a sparse CSC matrix, destinations x rows (ones; repeated
        edges add up), for in-place ``addmm_`` into destination state. Built per call from
        slices of the sorted edges (microseconds), not cached: SAR keeps its group graphs
        for the whole run, and a cached matrix per chunk would be resident memory."""
        ea, eb = self.edge_range(a, b)
        with warnings.catch_warnings():  # torch calls its sparse compressed support "beta"
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csc_tensor(self.row_ptr[a:b + 1] - ea, self.dst[ea:eb].long(),
                                           torch.ones(eb - ea, dtype=dtype),
                                           (self.num_dst, b - a))

    def chunks(self, chunk_rows: int, reverse: bool = False, lo: int = 0,
               hi: Optional[int] = None) -> Iterator[tuple[int, int, object]]:
        """``(a, b, block)`` per chunk of at most ``chunk_rows`` rows of ``[lo, hi)`` that has
        edges."""
        for a, b in self.bounds(chunk_rows, lo, hi):
            ea, eb = self.edge_range(a, b)
            if eb > ea:
                yield a, b, self.block(a, b, reverse)

    def edge_chunks(self, chunk_rows: int, lo: int = 0, hi: Optional[int] = None
                    ) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
        """``(a, b, u, v)`` per chunk of rows ``[lo, hi)`` that has edges: its edges' rows
        (``- a``) and destinations as int64, for kernels that gather by index instead of
        building the chunk's block."""
        for a, b in self.bounds(chunk_rows, lo, hi):
            ea, eb = self.edge_range(a, b)
            if eb > ea:
                yield a, b, self.src[ea:eb].long() - a, self.dst[ea:eb].long()

    def has_in_edge(self, a: int, b: int) -> torch.Tensor:
        """Bool per destination: does an edge of rows ``[a, b)`` reach it."""
        ea, eb = self.edge_range(a, b)
        m = torch.zeros(self.num_dst, dtype=torch.bool)
        m[self.dst[ea:eb].long()] = True
        return m

    def materialize(self, chunk_rows: int) -> None:
        """Build every chunk block (both directions, sparse formats) now."""
        for rev in (False, True):
            for _a, _b, g in self.chunks(chunk_rows, rev):
                g.create_formats_()


def chunk_slice(t: Optional[torch.Tensor], a: int, b: int) -> Optional[torch.Tensor]:
    """Rows ``[a, b)`` of ``t`` (None stays None)."""
    return None if t is None else t[a:b]
