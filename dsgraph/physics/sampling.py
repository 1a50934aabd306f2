"""Sampled radius graphs: random node subsets, capped radius neighbourhoods, edge features."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree


@dataclass
class SampledGraph:
    """A radius graph over a node subset of one field sample (all arrays numpy, global ids)."""

    nodes: np.ndarray  # (s,) indices into the sample's points
    pos: np.ndarray  # (s, 2)
    x: np.ndarray  # (s, F) normalized node inputs
    src: np.ndarray  # (E,) int64 local (0..s-1) source ids
    dst: np.ndarray  # (E,) int64 local destination ids
    efeat: np.ndarray  # (E, D) float32 edge features

    @property
    def num_nodes(self) -> int:
        """Number of sampled nodes s."""
        return len(self.nodes)


def sample_nodes(num_points: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """``min(s, num_points)`` distinct point indices drawn uniformly at random."""
    return rng.choice(num_points, size=min(s, num_points), replace=False)


def radius_edges(pos: np.ndarray, radius: float, max_edges: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges j -> i for every pair within ``radius`` (no self loops), at most
    ``max_edges`` incoming edges per node, extra ones dropped uniformly at random."""
    pairs = cKDTree(pos).query_pairs(radius, output_type="ndarray")
    if len(pairs) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]]).astype(np.int64)
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]]).astype(np.int64)
    # Random key per edge, sort by (dst, key): the first max_edges of each dst group survive.
    order = np.lexsort((rng.random(len(src)), dst))
    src, dst = src[order], dst[order]
    starts = np.searchsorted(dst, dst, side="left")
    keep = (np.arange(len(dst)) - starts) < max_edges
    return src[keep], dst[keep]


def edge_features(pos: np.ndarray, coef: np.ndarray, src: np.ndarray, dst: np.ndarray,
                  radius: float) -> np.ndarray:
    """Per edge: (pos_src - pos_dst)/radius, distance/radius, coef at the source, coef at the dst."""
    rel = (pos[src] - pos[dst]) / radius
    dist = np.linalg.norm(rel, axis=1, keepdims=True)
    return np.concatenate([rel, dist, coef[src], coef[dst]], axis=1).astype(np.float32)


def edge_feat_dim(coef_dim: int) -> int:
    """Width of :func:`edge_features` for ``coef_dim`` coefficient channels."""
    return 3 + 2 * coef_dim


def build(pos: np.ndarray, x: np.ndarray, coef: np.ndarray, nodes: np.ndarray, radius: float,
          max_edges: int, rng: np.random.Generator) -> SampledGraph:
    """The capped radius graph over ``nodes`` of one sample (pos, normalized x and coef rows)."""
    p = pos[nodes].astype(np.float64)
    src, dst = radius_edges(p, radius, max_edges, rng)
    ef = edge_features(p, coef[nodes], src, dst, radius)
    return SampledGraph(nodes=nodes, pos=p, x=x[nodes].astype(np.float32), src=src, dst=dst,
                        efeat=ef)


def sample_graph(pos: np.ndarray, x: np.ndarray, coef: np.ndarray, s: int, radius: float,
                 max_edges: int, rng: np.random.Generator) -> SampledGraph:
    """Draw ``s`` nodes of one sample and build their capped radius graph."""
    return build(pos, x, coef, sample_nodes(len(pos), s, rng), radius, max_edges, rng)


def cover_groups(num_points: int, s: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random partition of all points into groups of about ``s`` (full-field inference)."""
    perm = rng.permutation(num_points)
    groups = max(1, int(round(num_points / s)))
    return np.array_split(perm, groups)
