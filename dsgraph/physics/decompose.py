"""Domain decomposition of a sampled graph's nodes into P subdomains (one per worker)."""
from __future__ import annotations

import numpy as np

from dsgraph.errors import ConfigError
from dsgraph.partition.assign import metis_assignment, symmetric_csr


def bisection(pos: np.ndarray, parts: int) -> np.ndarray:
    """Recursive coordinate bisection: owner id per node, parts of near-equal size.

    Each step cuts the longer extent of the current box at the quantile that gives the two sides
    node counts proportional to their number of parts (so any P works, not only powers of 2).
    """
    owner = np.zeros(len(pos), dtype=np.int64)

    def _split(idx: np.ndarray, first: int, k: int) -> None:
        if k == 1 or len(idx) == 0:
            owner[idx] = first
            return
        k_left = k // 2
        p = pos[idx]
        axis = int(np.argmax(p.max(0) - p.min(0)))
        # A stable sort on (coordinate, id) makes ties deterministic.
        order = idx[np.lexsort((idx, p[:, axis]))]
        cut = int(round(len(idx) * k_left / k))
        _split(order[:cut], first, k_left)
        _split(order[cut:], first + k_left, k - k_left)

    _split(np.arange(len(pos)), 0, parts)
    return owner


def metis(num_nodes: int, src: np.ndarray, dst: np.ndarray, parts: int, seed: int = 0) -> np.ndarray:
    """METIS k-way partition (pymetis) of the symmetrised graph: owner id per node."""
    if parts == 1:  # nothing to cut: skip building the adjacency
        return np.zeros(num_nodes, dtype=np.int64)
    # The partitioner's own assignment (no vertex weights: every node counts once), so the
    # symmetrisation and the balance cap (rebalance) are the same as for partition files.
    adj = symmetric_csr(np.asarray(src), np.asarray(dst), num_nodes)
    return metis_assignment(adj, parts, None, seed)


def decompose(pos: np.ndarray, src: np.ndarray, dst: np.ndarray, parts: int,
              method: str = "bisection", seed: int = 0) -> np.ndarray:
    """Owner id (0..parts-1) of every node by ``method`` ("bisection" or "metis")."""
    if method == "bisection":
        return bisection(pos, parts)
    if method == "metis":
        return metis(len(pos), src, dst, parts, seed)
    raise ConfigError(f"physics.decomposition: expected 'bisection' or 'metis', got {method!r}")
