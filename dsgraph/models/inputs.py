"""Input rows a first layer may aggregate where they are stored, without gathering them.

A sampled batch's first block reads 5-10x more source rows than it has destinations. Gathering
them into one tensor writes every row once and the aggregation reads it again; the layer keeps
only the destinations' sums. :class:`InputRows` describes the rows instead: source ``i``'s row
is ``store[store_pos[i]]`` (a partition's rows, read in place from shared memory) or
``extra[extra_pos[i]]`` (rows brought from elsewhere: a feature cache, RPC). A layer whose
aggregation is a sum of source rows (SAGE ``mean`` and ``gcn``) sums straight from both
(:meth:`InputRows.aggregate_sum`) and gathers only its destinations' rows
(:meth:`InputRows.rows`); every other reader calls :meth:`InputRows.materialize`, the tensor the
gather would have made. The rows are inputs: they never require gradients.
"""
from __future__ import annotations

from dataclasses import dataclass

import dgl
import torch


@dataclass
class InputRows:
    """The rows of ``num_rows`` source nodes, split between ``store`` and ``extra`` (see the
    module docstring; a position of -1 says the row is in the other tensor)."""

    store: torch.Tensor
    store_pos: torch.Tensor
    extra: torch.Tensor
    extra_pos: torch.Tensor

    @property
    def num_rows(self) -> int:
        """Source rows described."""
        return int(self.store_pos.numel())

    @property
    def dtype(self) -> torch.dtype:
        """The rows' dtype."""
        return self.extra.dtype

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """The rows of sources ``idx``."""
        sp, ep = self.store_pos[idx], self.extra_pos[idx]
        out = self.store.index_select(0, sp.clamp(min=0)) if self.store.shape[0] \
            else torch.empty((idx.numel(), *self.extra.shape[1:]), dtype=self.dtype)
        moved = (ep >= 0).nonzero().squeeze(1)
        if moved.numel():
            out.index_copy_(0, moved, self.extra.index_select(0, ep[moved]))
        return out

    def materialize(self) -> torch.Tensor:
        """Every source's row, in order: what gathering them would return."""
        return self.rows(torch.arange(self.num_rows))

    def aggregate_sum(self, block: dgl.DGLGraph) -> torch.Tensor:
        """Per destination of ``block`` (whose sources these rows are), the sum of its in-edges'
        source rows, read where they are stored."""
        src, dst = block.edges()
        num_dst = block.num_dst_nodes()
        sp = self.store_pos[src]
        in_store = sp >= 0
        out = None
        for table, pos, keep in ((self.store, sp, in_store),
                                 (self.extra, self.extra_pos[src], ~in_store)):
            if not bool(keep.any()):
                continue
            part = dgl.create_block((pos[keep], dst[keep]), num_src_nodes=table.shape[0],
                                    num_dst_nodes=num_dst)
            summed = dgl.ops.copy_u_sum(part, table)
            out = summed if out is None else out + summed
        if out is None:
            out = torch.zeros((num_dst, *self.extra.shape[1:]), dtype=self.dtype)
        return out


def materialized(x):
    """``x`` as a tensor: :class:`InputRows` materialized, anything else as it is."""
    return x.materialize() if isinstance(x, InputRows) else x
