"""Node-to-part assignments: METIS k-way via pymetis (multi-constraint) and a random baseline."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp


def symmetric_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """The symmetrized adjacency without self-loops or duplicates (what METIS requires)."""
    keep = src != dst
    s, d = src[keep], dst[keep]
    a = sp.coo_matrix((np.ones(s.shape[0] * 2, dtype=np.int8),
                       (np.concatenate([s, d]), np.concatenate([d, s]))),
                      shape=(num_nodes, num_nodes)).tocsr()
    a.sum_duplicates()
    return a


def metis_assignment(adj: sp.csr_matrix, num_parts: int, vertex_weights: np.ndarray | None = None,
                     seed: int = 0) -> np.ndarray:
    """METIS k-way partition of a symmetric CSR; ``vertex_weights`` is (n, ncon) for balance."""
    import pymetis

    n = adj.shape[0]
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    opts = pymetis.Options()
    opts.seed = seed
    vw = None
    if vertex_weights is not None:
        vw = np.ascontiguousarray(vertex_weights, dtype=np.int64).reshape(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        result = pymetis.part_graph(num_parts, adjacency=pymetis.CSRAdjacency(adj.indptr, adj.indices),
                                    vweights=vw, options=opts, recursive=False)
    return np.asarray(result.vertex_part, dtype=np.int64)


def random_assignment(num_nodes: int, num_parts: int, seed: int = 0) -> np.ndarray:
    """Balanced random assignment (the baseline METIS is compared with)."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.arange(num_nodes) % num_parts).astype(np.int64)


def balance_weights(adj: sp.csr_matrix, train_mask: np.ndarray | None, balance_train: bool,
                    balance_edges: bool) -> np.ndarray | None:
    """METIS vertex weights: node count, plus training nodes and degree (as DGL balances them)."""
    cols = [np.ones(adj.shape[0], dtype=np.int64)]
    if balance_train and train_mask is not None and train_mask.any():
        cols.append(train_mask.astype(np.int64))
    if balance_edges:
        cols.append(np.diff(adj.indptr).astype(np.int64) + 1)
    return np.stack(cols, axis=1) if len(cols) > 1 else None
