"""The side of a linear layer's map to aggregate on: whichever needs less arithmetic.

SAGEConv (mean, gcn) and GraphConv apply a linear map ``W`` and a linear aggregation ``A``;
``A(X) W`` equals ``A(X W)``, so either order computes the same function. DGL 2.1 picks by width
alone (map first when ``in_feats > out_feats``), which on a sampled block multiplies every source
row although only the destinations are kept: with fanouts [10, 25] the first layer has 6-10x more
sources than destinations. Counting multiply-adds instead (the map over the rows it is applied to,
plus the aggregation over the edges at the width it runs at) picks the order per block.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn


def aggregate_first_is_cheaper(num_src: int, num_dst: int, num_edges: int, in_feats: int,
                               out_feats: int) -> bool:
    """Whether aggregating the raw rows, then mapping the destinations, takes no more
    multiply-adds than mapping every source row, then aggregating at the output width (a tie
    aggregates first, as DGL does at equal widths)."""
    aggregate_first = num_edges * in_feats + num_dst * in_feats * out_feats
    map_first = num_src * in_feats * out_feats + num_edges * out_feats
    return aggregate_first <= map_first


@contextlib.contextmanager
def aggregate_first(conv: nn.Module, on: bool = True) -> Iterator[None]:
    """DGL's SAGEConv / GraphConv aggregate before their linear map while this is active.

    DGL 2.1 picks the order in ``forward`` by ``_in_feats > _out_feats`` and reads
    ``_out_feats`` nowhere else there, so raising it for the call flips only the order; the
    results agree to rounding (tests/test_layer_order.py checks outputs and every gradient).
    """
    if not on:
        yield
        return
    out = conv._out_feats
    conv._out_feats = 2 ** 62
    try:
        yield
    finally:
        conv._out_feats = out
