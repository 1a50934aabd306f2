"""Link prediction's edge split: train / validation / test edges drawn with a seed, validation
and test edges removed from the graph that message passing sees (no leakage).

The split is over undirected node pairs: an edge (u, v) and its reverse (v, u) always land in the
same split, so a held-out edge cannot leak through its reverse. The training edges are the
edges left in the graph (both directions where the input has both); the held-out pairs are
kept as arrays of original node ids, (src, dst) with src < dst, one row per pair.
"""
from __future__ import annotations

from typing import Sequence

import dgl
import numpy as np
import torch

from dsgraph.errors import DataError

SPLITS = ("train", "val", "test")


def pair_keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """One int64 key per unordered node pair {src, dst} of a graph of ``n`` nodes."""
    a = np.minimum(src, dst).astype(np.int64)
    b = np.maximum(src, dst).astype(np.int64)
    return a * n + b


def split_edges(g: dgl.DGLGraph, fractions: Sequence[float], seed: int
                ) -> tuple[dgl.DGLGraph, dict[str, np.ndarray]]:
    """``g`` without its validation, test and unused edges, and the pairs of each split
    (``{"train": (P, 2), "val": ..., "test": ...}`` int64 original ids, src < dst).

    ``fractions`` are ``[train, val, test]`` of the unordered pairs without self-loops (a
    self-loop stays in the graph and in no split); the draw depends only on ``seed`` and the
    graph. Node data is kept; edge data is dropped (the kept edges are a subset).
    """
    n = g.num_nodes()
    src, dst = (t.numpy().astype(np.int64) for t in g.edges())
    loop = src == dst
    keys = np.unique(pair_keys(src[~loop], dst[~loop], n))
    counts = [int(round(f * keys.size)) for f in fractions[1:]]
    if min(counts) < 1:
        raise DataError(f"task.edge_split: {list(fractions)} of {keys.size} undirected edges "
                        f"leaves a split without edges; raise its fraction or use a larger graph")
    order = np.random.default_rng([seed, 34]).permutation(keys.size)  # a stream of its own
    n_val, n_test = counts
    n_train = min(int(round(fractions[0] * keys.size)), keys.size - n_val - n_test)
    bounds = np.cumsum([0, n_val, n_test, n_train])
    held = {"val": keys[order[bounds[0]:bounds[1]]], "test": keys[order[bounds[1]:bounds[2]]],
            "train": keys[order[bounds[2]:bounds[3]]]}
    kept = np.isin(pair_keys(src, dst, n), held["train"]) | loop
    out = dgl.graph((torch.from_numpy(src[kept]), torch.from_numpy(dst[kept])), num_nodes=n)
    for key, value in g.ndata.items():
        out.ndata[key] = value
    pairs = {name: np.stack([np.sort(k) // n, np.sort(k) % n], axis=1) for name, k in held.items()}
    return out, {name: pairs[name] for name in SPLITS}


def check_no_leak(g: dgl.DGLGraph, pairs: np.ndarray) -> int:
    """How many of ``pairs`` (either direction) are edges of ``g`` (0 when nothing leaks)."""
    src, dst = (t.numpy() for t in g.edges())
    return int(np.isin(pair_keys(src, dst, g.num_nodes()),
                       pair_keys(pairs[:, 0], pairs[:, 1], g.num_nodes())).sum())
