"""Coarsening a CSR file: size-capped label propagation clusters and the weighted cluster graph.

Everything is vectorized over row blocks of the memmapped CSR. Label propagation is
semi-asynchronous: each block decides at once from the labels left by earlier blocks, so small
blocks (a few percent of the rows) keep neighbours from swapping labels with each other.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from dsgraph.partition.streamed.csr_file import (
    BLOCK_ENTRIES,
    CsrFile,
    build_csr,
    index_dtype,
    new_npy,
    row_ranges,
)

# a progress printer: log(message) may be throttled, log(message, True) always prints
Log = Callable[..., None]


def lp_block_entries(nnz: int) -> int:
    """Entries per label-propagation block: at most 1/64 of the graph, at most 2**22."""
    return int(min(1 << 22, max(1 << 14, nnz // 64)))


def best_labels(local: np.ndarray, lab: np.ndarray, own: np.ndarray, size: np.ndarray,
                cap: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a block, the neighbour label joined next: the most frequent one, with ties
    broken at random in favour of the row's own label ``own[row]``, and labels whose
    ``size`` reached ``cap`` out of reach. ``local`` (block row of each entry) and ``lab``
    (the label at its column) describe the block. Returns rows with entries and their label.
    """
    span = int(lab.max()) + 1
    key = np.sort(local * span + lab)  # groups (row, label) runs; rows stay in order
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    count = np.diff(np.r_[starts, key.size])
    row, label = np.divmod(key[starts], span)
    bonus = np.where(label == own[row], 0.5, np.where(size[label] >= cap, -np.inf, 0.0))
    score = count + bonus + 0.2 * rng.random(starts.size)
    row_starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    best = np.maximum.reduceat(score, row_starts)
    hit = np.flatnonzero(score == np.repeat(best, np.diff(np.r_[row_starts, row.size])))
    hit = hit[np.r_[True, row[hit][1:] != row[hit][:-1]]]  # one per row
    return row[hit], label[hit]


def label_propagation(csr: CsrFile, cap: int, iterations: int, seed: int,
                      log: Log | None = None) -> np.ndarray:
    """Clusters of at most ``cap`` nodes: each node joins its neighbours' most common label.

    A second level (label propagation on the cluster graph, clusters of up to 256 nodes) was
    tried and dropped: METIS then left parts 1.4-1.6x the mean size and the final cut was
    ~1.5x worse (200k nodes, 4 parts).
    """
    n = csr.num_rows
    labels = np.arange(n, dtype=np.int64)
    size = np.ones(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    block = lp_block_entries(csr.nnz)
    for it in range(iterations):
        moved = 0
        for r0, r1 in row_ranges(csr.indptr, block):
            a, b = int(csr.indptr[r0]), int(csr.indptr[r1])
            if a == b:
                continue
            local = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(csr.indptr[r0:r1 + 1]))
            lab = labels[csr.read(a, b)[0]]
            rows, target = best_labels(local, lab, labels[r0:r1], size, cap, rng)
            nodes = rows + r0
            move = target != labels[nodes]
            nodes, target = nodes[move], target[move]
            if nodes.size == 0:
                continue
            # admit movers into each target cluster while it has room, in random order
            order = np.lexsort((rng.random(nodes.size), target))
            nodes, target = nodes[order], target[order]
            starts = np.flatnonzero(np.r_[True, target[1:] != target[:-1]])
            rank = np.arange(target.size) - np.repeat(starts, np.diff(np.r_[starts, target.size]))
            ok = size[target] + rank + 1 <= cap
            nodes, target = nodes[ok], target[ok]
            np.subtract.at(size, labels[nodes], 1)
            np.add.at(size, target, 1)
            labels[nodes] = target
            moved += nodes.size
            if log is not None:
                log(f"label propagation round {it + 1}: rows up to {r1:,} of {n:,}")
        if log is not None:
            log(f"label propagation round {it + 1}/{iterations}: {moved:,} nodes moved", True)
        if moved < n // 100:  # later rounds move few nodes and change the cut little
            break
    _, compact = np.unique(labels, return_inverse=True)
    return compact.astype(np.int64)


def coarse_graph(csr: CsrFile, labels: np.ndarray, work_dir: Path, log: Log | None = None
                 ) -> CsrFile:
    """The cluster graph: one node per label, edge weights = fine entries between clusters."""
    nc = int(labels.max()) + 1 if labels.size else 0

    def entries():
        for r0, r1 in row_ranges(csr.indptr, BLOCK_ENTRIES):
            a, b = int(csr.indptr[r0]), int(csr.indptr[r1])
            rl = np.repeat(labels[r0:r1], np.diff(csr.indptr[r0:r1 + 1]))
            cl = labels[csr.read(a, b)[0]]
            keep = rl != cl
            # pre-sum each block's duplicate cluster pairs: fewer entries reach the file
            key, w = np.unique(rl[keep] * nc + cl[keep], return_counts=True)
            yield key // nc, key % nc, w.astype(np.int64)

    return build_csr(nc, entries, work_dir, "coarse", weighted=True, log=log)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """A 64-bit integer hash (splitmix64's finalizer), vectorized."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sparsify(csr: CsrFile, max_entries: int, seed: int, work_dir: Path) -> tuple[CsrFile, float]:
    """Keep each edge with probability ``min(1, w / W)`` (as weight ``max(w, W)``), W chosen so
    about ``max_entries`` entries remain; the choice hashes the unordered pair, so the result
    stays symmetric. Returns the graph (unchanged when it is small enough) and W."""
    if csr.nnz <= max_entries:
        return csr, 1.0
    top = 1 << 16
    hist = np.zeros(top + 1, dtype=np.int64)
    for r0, r1 in row_ranges(csr.indptr, BLOCK_ENTRIES):
        w = csr.read(int(csr.indptr[r0]), int(csr.indptr[r1]))[1]
        hist += np.bincount(np.minimum(w, top), minlength=top + 1)
    wv = np.arange(top + 1, dtype=np.float64)
    lo, hi = 1.0, float(top)
    for _ in range(60):  # expected entries kept falls as W grows: bisect
        mid = (lo + hi) / 2
        if (hist * np.minimum(1.0, wv / mid)).sum() > max_entries:
            lo = mid
        else:
            hi = mid
    big_w = hi
    n = csr.num_rows
    idx_t = index_dtype(n, csr.nnz)
    ipath, wpath = work_dir / "sparse.indices.npy", work_dir / "sparse.weights.npy"
    indices, weights = new_npy(ipath, csr.nnz, idx_t), new_npy(wpath, csr.nnz, idx_t)
    new_ptr = np.zeros(n + 1, dtype=np.int64)
    out = 0
    salt = np.uint64(seed * 0x632BE59BD9B4E019 % 2 ** 64)
    for r0, r1 in row_ranges(csr.indptr, BLOCK_ENTRIES):
        a, b = int(csr.indptr[r0]), int(csr.indptr[r1])
        rows = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(csr.indptr[r0:r1 + 1]))
        cols, w = csr.read(a, b)
        cols = cols.astype(np.int64)
        pair = np.minimum(rows, cols) * n + np.maximum(rows, cols)
        u = (_splitmix(pair ^ salt) >> np.uint64(11)).astype(np.float64) / 2.0 ** 53
        keep = u < w / big_w
        k = int(keep.sum())
        indices[out:out + k] = cols[keep]
        weights[out:out + k] = np.maximum(w[keep], int(round(big_w)))
        new_ptr[r0 + 1:r1 + 1] = np.bincount(rows[keep] - r0, minlength=r1 - r0)
        out += k
    np.cumsum(new_ptr, out=new_ptr)
    indices.flush()
    weights.flush()
    del indices, weights  # unmap
    ptr = new_ptr.astype(idx_t) if idx_t == np.int32 else new_ptr
    return CsrFile(ptr, ipath, wpath), big_w
