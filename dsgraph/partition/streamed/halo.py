"""Halo discovery in DGL's order, one part at a time, from edges already in new (reshuffled) ids.

``dgl.partition_graph_with_halo(g, a, hops, reshuffle=True)`` (C++ ``GetSubgraphWithHalo``)
lists a part's nodes as: its owned nodes in id order; hop 1: the sources of the in-edges of owned
nodes (in edge-id order) not seen yet, in order of first appearance; hop ``j+1``: the sources of
the in-edges of hop ``j``'s nodes (grouped by that node's position in hop ``j``, edge-id order
within it) that are not owned, first appearance; last, the destinations of the out-edges of
owned nodes (by source, then edge id) not seen yet. Edges: every in-edge of owned nodes
(``inner_edge``), every in-edge of a hop ``j < hops`` node from a node not owned, and every
out-edge from an owned node to one not owned; inner edges first, each group by edge id.
With ``reshuffle`` the new edge ids follow the in-CSR of the reshuffled graph: by new
destination id, original edge id within one.
"""
from __future__ import annotations

import numpy as np


def first_occurrences(ids: np.ndarray) -> np.ndarray:
    """The distinct values of ``ids`` in order of first appearance."""
    _, first = np.unique(ids, return_index=True)  # mergesort inside: the first index of each
    return ids[np.sort(first)]


def part_of(new_ids: np.ndarray, node_start: np.ndarray) -> np.ndarray:
    """The part owning each new (part-major) node id."""
    return np.searchsorted(node_start, new_ids, side="right") - 1


def seen_mask(num_nodes: int, lo: int, hi: int, fronts: list[np.ndarray]) -> np.ndarray:
    """Nodes a part holds so far: its owned range and every hop found."""
    seen = np.zeros(num_nodes, dtype=bool)
    seen[lo:hi] = True
    for front in fronts:
        seen[front] = True
    return seen


def next_front(front: np.ndarray, src: np.ndarray, dst: np.ndarray, seen: np.ndarray
               ) -> np.ndarray:
    """Hop ``j+1`` from hop ``j`` (``front``, ordered) and the in-edges of its nodes from nodes
    not owned (``src``, ``dst``, in edge-id order)."""
    if src.size == 0:
        return np.empty(0, dtype=np.int64)
    sorter = np.argsort(front, kind="stable")
    rank = sorter[np.searchsorted(front, dst, sorter=sorter)]  # dst's position in the front
    cand = src[np.argsort(rank, kind="stable")]
    return first_occurrences(cand[~seen[cand]])


def out_neighbours(src: np.ndarray, dst: np.ndarray, eid: np.ndarray, seen: np.ndarray
                   ) -> np.ndarray:
    """The last group of halo nodes: destinations of out-edges of owned nodes (by source, then
    edge id) not seen in any hop."""
    if src.size == 0:
        return np.empty(0, dtype=np.int64)
    cand = dst[np.lexsort((eid, src))]
    return first_occurrences(cand[~seen[cand]])


def one_hop_halo(num_nodes: int, lo: int, hi: int, endpoints: list[np.ndarray]) -> np.ndarray:
    """:func:`dsgraph.partition.format.split_one_hop`'s halo: endpoints outside ``[lo, hi)``,
    sorted (a mark array: O(nodes + edges))."""
    seen = np.zeros(num_nodes, dtype=bool)
    for ids in endpoints:
        seen[ids] = True
    seen[lo:hi] = False
    return np.flatnonzero(seen)
