"""``GroupBlock``: the block a layer sees during one run over one group of a RematBlock."""
from __future__ import annotations

from typing import Optional, Protocol

import torch

from dsgraph.remat.block import Group, RematBlock
from dsgraph.seqagg.view import GraphView


class GroupRun(Protocol):
    """What a GroupBlock asks of the run it belongs to (:class:`dsgraph.remat.run.Run`)."""

    rb: RematBlock

    def aggregate(self, group: Optional[Group], u: torch.Tensor,
                  reduce: str) -> torch.Tensor: ...

    def attend(self, group: Optional[Group], ft: torch.Tensor, el: torch.Tensor,
               er: torch.Tensor, slope: float) -> torch.Tensor: ...


class Collected(Exception):
    """Raised by a GroupBlock's aggregation to stop the layer once the group is folded in."""


class GroupBlock(GraphView):
    """A DGL block over one group's rows (``srcdata``) and every destination (an output run:
    no rows, a chunk of destinations); its aggregation calls go to the run
    (:class:`dsgraph.remat.run.Run`)."""

    is_block = True
    label = "sampled.rematerialize"

    def __init__(self, run: GroupRun, group: Optional[Group],
                 dst: Optional[tuple[int, int]] = None) -> None:
        super().__init__()
        self._run, self._group = run, group
        # destination rows [a, b) this run computes (output runs go in row chunks)
        self._dst_range = dst if dst is not None else (0, run.rb.num_dst)

    def _counts(self) -> tuple[int, int, int]:
        # the group's rows (none in an output run), this run's destinations, and the edges of
        # the whole block
        a, b = self._dst_range
        rows = 0 if self._group is None else self._group.graph.num_src
        return rows, b - a, self._run.rb.num_edges

    def _degrees(self, out: bool) -> torch.Tensor:
        # degrees in the whole block: out of this group's rows, into this run's destinations
        rb = self._run.rb
        if out:
            return torch.zeros(0, dtype=rb.out_deg.dtype) if self._group is None else \
                rb.out_deg[self._group.rows]
        a, b = self._dst_range
        return rb.in_deg[a:b]

    def _fold(self, u: torch.Tensor, reduce: str) -> torch.Tensor:
        return self._run.aggregate(self._group, u, reduce)

    def attention(self, ft: torch.Tensor, el: torch.Tensor, er: torch.Tensor,
                  slope: float) -> torch.Tensor:
        """GAT's fused attention + aggregation over the groups (see dsgraph.seqagg.gat)."""
        return self._run.attend(self._group, ft, el, er, slope)
