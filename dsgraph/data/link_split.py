"""Link prediction's edge split: train / validation / test edges drawn with a seed, validation
and test edges removed from the graph that message passing sees (no leakage).

The split is over undirected node pairs: an edge (u, v) and its reverse (v, u) always land in the
same split, so a held-out edge cannot leak through its reverse. The training edges are the
edges left in the graph (both directions where the input has both); the held-out pairs are
kept as arrays of original node ids, (src, dst) with src < dst, one row per pair; where the
dataset has ids of its own (a CSV folder's ``node_id``), the same pairs in those ids beside them
(:func:`with_user_ids`).

A dataset may ship its own split (:class:`GivenSplit`: OGB link folders, a DGL CSV folder's edge
masks); :func:`apply_given_split` then uses it instead of drawing one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

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


def with_user_ids(arrays: dict[str, np.ndarray], ids: np.ndarray) -> dict[str, np.ndarray]:
    """``arrays`` (``link_split.npz``'s) plus ``<split>_ids``: each split's pairs in the user's
    node ids (``ids[i]``: node i's id in the dataset's files, a CSV folder's ``node_id``), the
    ids ``python -m predict`` and ``--pairs`` speak; the positions stay under ``<split>``."""
    return {**arrays, **{f"{name}_ids": ids[arrays[name]] for name in SPLITS}}


def check_no_leak(g: dgl.DGLGraph, pairs: np.ndarray) -> int:
    """How many of ``pairs`` (either direction) are edges of ``g`` (0 when nothing leaks)."""
    src, dst = (t.numpy() for t in g.edges())
    return int(np.isin(pair_keys(src, dst, g.num_nodes()),
                       pair_keys(pairs[:, 0], pairs[:, 1], g.num_nodes())).sum())


@dataclass
class GivenSplit:
    """A dataset's own edge split (OGB's ``split/`` files, a DGL CSV folder's edge masks).

    ``pairs`` holds ``train`` / ``val`` / ``test`` ``(P, 2)`` int64 original node ids (src < dst
    unless ``directed``: then (source, target) as given); ``negatives`` the evaluation negatives
    the dataset ships (:data:`NEGATIVE_KEYS`); ``refuse``, when set, is why the dataset cannot be
    used for link prediction (read only when that task asks for the split).
    """

    source: str
    pairs: dict[str, np.ndarray] = field(default_factory=dict)
    negatives: dict[str, np.ndarray] = field(default_factory=dict)
    directed: bool = False
    refuse: Optional[str] = None


# link_split.npz keys of given negatives: per positive (P, K) destinations (MRR) and shared
# (M, 2) pairs (Hits@K), original node ids.
NEGATIVE_KEYS = ("val_neg_dst", "test_neg_dst", "val_neg_pairs", "test_neg_pairs")
_ATTR = "dsgraph_given_link_split"  # a plain attribute: DGL never copies it to derived graphs


def attach_given_split(g: dgl.DGLGraph, given: GivenSplit) -> dgl.DGLGraph:
    """``g`` carrying ``given`` (read back by :func:`given_split`)."""
    setattr(g, _ATTR, given)
    return g


def given_split(g: dgl.DGLGraph) -> Optional[GivenSplit]:
    """The split ``g``'s dataset ships (None if it has none); a DataError when the dataset
    cannot be used for link prediction."""
    given = getattr(g, _ATTR, None)
    if given is not None and given.refuse is not None:
        raise DataError(given.refuse)
    return given


def apply_given_split(g: dgl.DGLGraph, given: GivenSplit
                      ) -> tuple[dgl.DGLGraph, dict[str, np.ndarray], int]:
    """``g`` cut to the given training pairs, minus every validation and test pair in either
    direction (no leakage, even where a training edge repeats a held-out pair); the arrays for
    ``link_split.npz`` (splits and negatives); and how many training pairs were dropped for
    repeating a held-out one."""
    n = g.num_nodes()
    keys = {k: pair_keys(v[:, 0], v[:, 1], n) for k, v in given.pairs.items()}
    both = np.intersect1d(keys["val"], keys["test"])
    if both.size:
        a, b = divmod(int(both[0]), n)
        raise DataError(f"{given.source}: {both.size} node pairs are both validation and test "
                        f"edges (first {a}-{b}); the splits must be disjoint")
    held = np.union1d(keys["val"], keys["test"])
    src, dst = (t.numpy().astype(np.int64) for t in g.edges())
    edge_keys = pair_keys(src, dst, n)
    kept = np.isin(edge_keys, keys["train"]) & ~np.isin(edge_keys, held)
    out = dgl.graph((torch.from_numpy(src[kept]), torch.from_numpy(dst[kept])), num_nodes=n)
    for key, value in g.ndata.items():
        out.ndata[key] = value
    repeats = np.isin(keys["train"], held)
    arrays = {"train": given.pairs["train"][~repeats], "val": given.pairs["val"],
              "test": given.pairs["test"], **given.negatives}
    return out, arrays, int(repeats.sum())
