"""Synthetic node graphs: a degree-corrected stochastic block model.

Communities are the classes; expected degrees are Pareto(``degree_alpha``) distributed (a few
hubs, many low-degree nodes, as in citation/product graphs); a ``homophily`` fraction of edge
endpoints is drawn inside the source's community. Features are ``feat_signal * mu[label] +
N(0, 1)``, so features alone identify the class poorly and the graph carries the signal.
``dataset.target`` ``regression`` / ``multilabel`` replaces the class labels by targets that
depend on the community and the neighbours (:mod:`dsgraph.data.synthetic_targets`).
Everything is vectorized numpy; memory is linear in nodes + edges.
"""
from __future__ import annotations

import dgl
import numpy as np
import torch

from dsgraph.config import DatasetConfig
from dsgraph.data.synthetic_targets import add_targets


def _pick_weighted(cum: np.ndarray, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices into ``cum`` drawn with probability proportional to weight within [lo, hi) mass."""
    r = lo + rng.random(lo.shape[0]) * (hi - lo)
    return np.minimum(np.searchsorted(cum, r, side="right"), cum.shape[0] - 1)


def sbm_edges(labels: np.ndarray, num_classes: int, avg_degree: float, homophily: float,
              degree_alpha: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Undirected DC-SBM edge list (each pair once, no self-loops) with mean degree ~avg_degree."""
    n = labels.shape[0]
    theta = rng.pareto(degree_alpha - 1.0, n) + 1.0  # heavy tail, minimum 1
    theta = np.minimum(theta, n ** 0.5 * theta.mean())  # cap hubs so max degree stays realistic
    order = np.argsort(labels, kind="stable")  # nodes grouped by community
    cum = np.cumsum(theta[order])
    counts = np.bincount(labels, minlength=num_classes)
    ends = np.cumsum(counts)
    starts = ends - counts
    base = np.concatenate([[0.0], cum])
    comm_lo, comm_hi = base[starts], base[ends]
    # Oversample slightly: duplicates and self-loops are removed below.
    m = int(n * avg_degree / 2 * 1.04)
    src = order[_pick_weighted(cum, np.zeros(m), np.full(m, cum[-1]), rng)]
    intra = rng.random(m) < homophily
    c = labels[src]
    lo = np.where(intra, comm_lo[c], 0.0)
    hi = np.where(intra, comm_hi[c], cum[-1])
    dst = order[_pick_weighted(cum, lo, hi, rng)]
    keep = src != dst
    a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    key = np.unique(a.astype(np.int64) * n + b)
    return key // n, key % n


def generate(cfg: DatasetConfig) -> dgl.DGLGraph:
    """Build the synthetic graph described by ``cfg`` (deterministic per ``cfg.seed``)."""
    rng = np.random.default_rng(cfg.seed)
    n, k = cfg.num_nodes, cfg.num_classes
    labels = rng.integers(0, k, n)
    a, b = sbm_edges(labels, k, cfg.avg_degree, cfg.homophily, cfg.degree_alpha, rng)
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
    mu = rng.standard_normal((k, cfg.feat_dim)).astype(np.float32)
    feat = cfg.feat_signal * mu[labels] + rng.standard_normal((n, cfg.feat_dim), dtype=np.float32)
    if cfg.target == "class":
        g.ndata["feat"] = torch.from_numpy(feat)
        g.ndata["label"] = torch.from_numpy(labels)
    else:  # a stream of its own: the class graph's draws stay as they were
        feat, targets = add_targets(cfg.target, feat, labels, k, cfg.num_targets, src, dst,
                                    np.random.default_rng([cfg.seed, 1]))
        g.ndata["feat"] = torch.from_numpy(feat)
        g.ndata["label"] = torch.from_numpy(targets)
    perm = rng.permutation(n)
    n_train, n_val, n_test = (int(round(f * n)) for f in (cfg.train_frac, cfg.val_frac, cfg.test_frac))
    bounds = np.cumsum([0, n_train, n_val, n_test])
    for name, lo, hi in zip(("train_mask", "val_mask", "test_mask"), bounds[:-1], bounds[1:]):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(perm[lo:hi])] = True
        g.ndata[name] = mask
    return g
