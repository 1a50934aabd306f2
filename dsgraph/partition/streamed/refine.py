"""Balance-respecting label-propagation refinement of a k-way assignment over a CSR file.

Each row block moves its nodes, all at once, to the part holding most of their neighbours when
that beats their own part and the destination has room in the node's class (training / other
nodes, each capped as :func:`dsgraph.partition.assign.rebalance` caps them). The best gains are
admitted first. Vectorized numpy per block; memory grows with the nodes.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from dsgraph.partition.streamed.coarsen import lp_block_entries
from dsgraph.partition.streamed.csr_file import CsrFile, row_ranges


def class_caps(classes: np.ndarray, num_classes: int, num_parts: int,
               caps: list[float]) -> np.ndarray:
    """(num_classes,) cap on a class's nodes per part, rounded as ``rebalance`` rounds it."""
    sizes = np.bincount(classes, minlength=num_classes)
    return np.array([max(-(-int(s) // num_parts), int(np.floor(c * s / num_parts)))
                     for s, c in zip(sizes, caps)], dtype=np.int64)


def refine(csr: CsrFile, assign: np.ndarray, num_parts: int, classes: np.ndarray,
           cap: np.ndarray, rounds: int = 3,
           log: Callable[..., None] | None = None) -> np.ndarray:
    """Greedy cut-reducing moves that keep every class's part count <= ``cap[class]``."""
    assign = assign.copy()
    ncls = cap.shape[0]
    load = np.bincount(classes * num_parts + assign,
                       minlength=ncls * num_parts).reshape(ncls, num_parts)
    block = lp_block_entries(csr.nnz)
    for rnd in range(rounds):
        moved, gained = 0, 0
        for r0, r1 in row_ranges(csr.indptr, block):
            a, b = int(csr.indptr[r0]), int(csr.indptr[r1])
            m = r1 - r0
            local = np.repeat(np.arange(m, dtype=np.int64), np.diff(csr.indptr[r0:r1 + 1]))
            conn = np.bincount(local * num_parts + assign[csr.read(a, b)[0]],
                               minlength=m * num_parts).reshape(m, num_parts)
            home = assign[r0:r1].copy()
            cls = classes[r0:r1]
            room = cap[cls][:, None] - load[cls]  # (m, parts): room of each node's class
            cand = np.where(room > 0, conn, -1)
            dest = cand.argmax(axis=1)
            gain = cand[np.arange(m), dest] - conn[np.arange(m), home]
            mv = np.flatnonzero((gain > 0) & (dest != home))
            if mv.size:
                mv = _admit(mv, gain, cls, dest, num_parts, cap[cls[mv]] - load.reshape(-1)[
                    cls[mv] * num_parts + dest[mv]])
                _apply(load, assign, r0, mv, cls, home, dest)
                moved += mv.size
                gained += int(gain[mv].sum())
            # parts at their cap: exchange nodes pairwise, A->B with B->A, while the pair gains
            rest = np.ones(m, dtype=bool)
            rest[mv] = False
            other = np.where(np.arange(num_parts) == home[:, None], -1, conn)
            to = other.argmax(axis=1)
            g2 = other[np.arange(m), to] - conn[np.arange(m), home]
            sw = _swaps(np.flatnonzero(rest & (other[np.arange(m), to] > 0)), g2, cls, home, to,
                        num_parts)
            if sw.size:
                _apply(load, assign, r0, sw, cls, home, to)
                moved += sw.size
                gained += int(g2[sw].sum())
        if log is not None:
            log(f"refinement round {rnd + 1}/{rounds}: {moved:,} nodes moved, "
                f"~{gained:,} cut entries saved", True)
        if moved < max(1, assign.shape[0] // 2000):
            break
    return assign


def _admit(mv: np.ndarray, gain: np.ndarray, cls: np.ndarray, dest: np.ndarray, num_parts: int,
           room: np.ndarray) -> np.ndarray:
    """Of the movers ``mv``, the best gains of each (class, destination) that its room allows."""
    slot = cls[mv] * num_parts + dest[mv]
    order = np.lexsort((-gain[mv], slot))
    mv, slot, room = mv[order], slot[order], room[order]
    starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
    rank = np.arange(slot.size) - np.repeat(starts, np.diff(np.r_[starts, slot.size]))
    return mv[rank < room]


def _swaps(cand: np.ndarray, gain: np.ndarray, cls: np.ndarray, home: np.ndarray,
           to: np.ndarray, num_parts: int) -> np.ndarray:
    """Nodes to exchange: per class and pair of parts, the best A->B and B->A candidates
    paired in order of gain while a pair's gains sum to more than zero."""
    if cand.size == 0:
        return cand
    slot = (cls[cand] * num_parts + home[cand]) * num_parts + to[cand]
    order = np.lexsort((-gain[cand], slot))
    cand, slot = cand[order], slot[order]
    starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
    ends = np.r_[starts[1:], slot.size]
    group = {int(slot[s]): (s, e) for s, e in zip(starts, ends)}
    out = []
    for key, (s, e) in group.items():
        c, rem = divmod(key, num_parts * num_parts)
        p, q = divmod(rem, num_parts)
        if p > q or (c * num_parts + q) * num_parts + p not in group:
            continue
        s2, e2 = group[(c * num_parts + q) * num_parts + p]
        t = min(e - s, e2 - s2)
        pos = np.flatnonzero(gain[cand[s:s + t]] + gain[cand[s2:s2 + t]] <= 0)
        t = int(pos[0]) if pos.size else t
        out += [cand[s:s + t], cand[s2:s2 + t]]
    return np.concatenate(out) if out else cand[:0]


def _apply(load: np.ndarray, assign: np.ndarray, r0: int, mv: np.ndarray, cls: np.ndarray,
           home: np.ndarray, dest: np.ndarray) -> None:
    """Move block rows ``mv`` to ``dest`` and update the per-class loads."""
    np.subtract.at(load, (cls[mv], home[mv]), 1)
    np.add.at(load, (cls[mv], dest[mv]), 1)
    assign[r0 + mv] = dest[mv]
