"""``train.mode: sampled``: mini-batches sampled from DistGraph servers' partitions.

One runtime (:mod:`.runtime`: the DistGraph, the epoch loop, DDP, the prefetch thread) trains
whatever its batch source (:mod:`.source`) yields: node batches of a homogeneous graph
(:mod:`.nodes`), labelled edge batches for the edge tasks (:mod:`.edges`), edge batches with
negatives for link prediction (:mod:`.links`) or typed node batches of a heterogeneous graph
(:mod:`.typed`). With ``sampled.rematerialize`` the first blocks' sources
are pulled and aggregated one owning partition at a time and rebuilt in backward
(:mod:`dsgraph.remat`); with ``sampled.prefetch`` a thread samples and reads the next batches
while one trains (:mod:`dsgraph.distgraph.prefetch`).
"""
from __future__ import annotations

from dsgraph.modes.sampled.runtime import SampledStrategy

__all__ = ["SampledStrategy"]
