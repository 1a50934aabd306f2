"""``train.mode: sar``: full-batch sequential aggregation and rematerialization.

One runtime (:mod:`.runtime`: the worker's partition, shards and ring plan, the full-graph
forward and step) trains whatever its full-graph source (:mod:`.source`) makes of the output:
the labelled nodes of node tasks (:mod:`.nodes`) or the node pairs of link prediction
(:mod:`.links`). The aggregation itself is :mod:`dsgraph.sar`.
"""
from __future__ import annotations

from dsgraph.modes.sar.runtime import SarStrategy

__all__ = ["SarStrategy"]
