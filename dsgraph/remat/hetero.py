"""``HeteroRematBlock``: a heterogeneous mini-batch's first block, each relation out of a type
with stored rows rematerialized (:class:`~dsgraph.remat.block.RematBlock`).

``dgl.nn.HeteroGraphConv`` runs one ``dgl.nn`` layer per relation on ``block[src, rel, dst]``;
this block hands it a RematBlock there, whose source rows (of the relation's source type) are
pulled group by group from that type's row source and whose destination rows are the ones the
layer is given, so the relation's layer runs as :mod:`dsgraph.remat` runs a homogeneous one.
Relations out of a type without a row source (a featureless type's learnable embedding, which
the caller reads whole) get the plain relation block.

Contract with the model (:mod:`dsgraph.models.hetero`): the input rows of a type with a row
source are its *destination* rows only (a block's destinations are its first sources), what the
model's per-type self-loop and the relations into that type read; the relation layers out of
that type ignore the source tensor they are handed and pull the rows themselves.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from dsgraph.remat.block import RematBlock
from dsgraph.remat.rows import RowSource

CanonicalEtype = tuple[str, str, str]


class HeteroRematBlock:
    """A heterogeneous DGL block whose relations out of the types in ``sources`` are
    RematBlocks (built on first use). ``owner(ids, ntype)`` gives the partition of a type's ids;
    ``widths`` each source type's row width."""

    is_block = True

    def __init__(self, block: Any, sources: dict[str, RowSource], widths: dict[str, int],
                 owner: Callable[[torch.Tensor, str], torch.Tensor], own_part: int = 0,
                 chunk_rows: int = 0, compression: Any = None,
                 dtype: torch.dtype = torch.float32) -> None:
        self.block, self.sources, self.widths = block, sources, widths
        self.owner, self.own_part, self.chunk_rows = owner, own_part, chunk_rows
        self.compression, self.dtype = compression, dtype
        self.canonical_etypes = block.canonical_etypes
        self.srctypes, self.dsttypes = block.srctypes, block.dsttypes
        self.ntypes = block.ntypes
        self._relations: dict[CanonicalEtype, Any] = {}

    def __getitem__(self, etype: CanonicalEtype) -> Any:
        """The relation's block: a RematBlock if its source type has a row source."""
        etype = self.block.to_canonical_etype(etype)
        rel = self._relations.get(etype)
        if rel is None:
            src = etype[0]
            rel = self.block[etype]
            if src in self.sources:
                rel = RematBlock(rel, self.sources[src], lambda ids: self.owner(ids, src),
                                 self.own_part, self.chunk_rows, self.compression,
                                 self.widths[src], self.dtype)
            self._relations[etype] = rel
        return rel

    def num_dst_nodes(self, ntype: Optional[str] = None) -> int:
        """Destination nodes of ``ntype``."""
        return self.block.num_dst_nodes(ntype)

    number_of_dst_nodes = num_dst_nodes

    def num_src_nodes(self, ntype: Optional[str] = None) -> int:
        """Source nodes of ``ntype``."""
        return self.block.num_src_nodes(ntype)

    number_of_src_nodes = num_src_nodes

    def input_rows(self, input_nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The ids whose rows the model is given: a type with a row source its destination
        rows' ids, every other type all its input nodes' ids."""
        return {t: ids[:self.block.num_dst_nodes(t)] if t in self.sources else ids
                for t, ids in input_nodes.items()}
