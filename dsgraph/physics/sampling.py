"""Sampled radius graphs: random node subsets, capped radius neighbourhoods, edge features.

The per-node edge cap keeps, for each destination, the ``max_edges`` candidates with the smallest
hash of (salt, source, destination). The choice for one destination depends only on its own
candidates, so a worker can build just the edges into the nodes it owns and get exactly the edges
a single process would build for them (DS-MPNN workers do not build the whole graph).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.spatial import cKDTree

_MAX_NODES = 1 << 21  # two node ids and >= 22 hash bits share one 64-bit sort key


@dataclass
class SampledGraph:
    """A radius graph over a node subset of one field sample (all arrays numpy, global ids).

    ``src``/``dst``/``efeat`` hold the capped edges into the built destinations (all nodes, or one
    worker's); ``near_src``/``near_dst`` every within-radius pair into them before the cap.
    """

    nodes: np.ndarray  # (s,) indices into the sample's points
    pos: np.ndarray  # (s, d)
    x: np.ndarray  # (s, F) normalized node inputs
    src: np.ndarray  # (E,) int64 local (0..s-1) source ids
    dst: np.ndarray  # (E,) int64 local destination ids
    efeat: np.ndarray  # (E, D) float32 edge features
    near_src: np.ndarray | None = None  # (K,) uncapped candidate sources
    near_dst: np.ndarray | None = None  # (K,) their destinations

    @property
    def num_nodes(self) -> int:
        """Number of sampled nodes s."""
        return len(self.nodes)

    def restrict(self, dst_mask: np.ndarray) -> "SampledGraph":
        """The same graph with only the edges (and candidates) into nodes where ``dst_mask``."""
        e = dst_mask[self.dst]
        out = replace(self, src=self.src[e], dst=self.dst[e], efeat=self.efeat[e])
        if self.near_dst is not None:
            k = dst_mask[self.near_dst]
            out = replace(out, near_src=self.near_src[k], near_dst=self.near_dst[k])
        return out


def sample_nodes(num_points: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """``min(s, num_points)`` distinct point indices drawn uniformly at random."""
    return rng.choice(num_points, size=min(s, num_points), replace=False)


def radius_pairs(pos: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Every directed pair j -> i within ``radius`` (no self loops), as (src, dst) int64 arrays."""
    pairs = cKDTree(pos).query_pairs(radius, output_type="ndarray")
    if len(pairs) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]]).astype(np.int64)
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]]).astype(np.int64)
    return src, dst


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a well-mixed 64-bit hash of each uint64."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def cap_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, max_edges: int,
              salt: int) -> np.ndarray:
    """Indices of the candidate edges kept by the cap: per destination, the ``max_edges`` with
    the smallest hash of (salt, src, dst); returned sorted by (dst, hash)."""
    if num_nodes > _MAX_NODES:
        raise ValueError(f"at most {_MAX_NODES} sampled nodes per graph, got {num_nodes}")
    bits = max(1, int(num_nodes - 1).bit_length())
    s64, d64 = src.astype(np.uint64), dst.astype(np.uint64)
    h = _mix(s64 * np.uint64(num_nodes) + d64 + np.uint64(salt))
    # Key = [dst | hash bits | src]: unique per edge, so any sort gives the same order.
    key = (d64 << np.uint64(64 - bits)) | ((h >> np.uint64(2 * bits)) << np.uint64(bits)) | s64
    order = np.argsort(key)
    d = dst[order]
    # Position of each edge within its destination's run of the sorted order.
    first = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    within = np.arange(len(d)) - np.repeat(first, np.diff(np.r_[first, len(d)]))
    return order[within < max_edges]


def draw_salt(rng: np.random.Generator) -> int:
    """The per-graph seed of the edge cap's hash."""
    return int(rng.integers(0, 2 ** 63 - 1))


def radius_edges(pos: np.ndarray, radius: float, max_edges: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges j -> i for every pair within ``radius`` (no self loops), at most
    ``max_edges`` incoming edges per node, extra ones dropped at random (seeded by ``rng``)."""
    src, dst = radius_pairs(pos, radius)
    keep = cap_edges(src, dst, len(pos), max_edges, draw_salt(rng))
    return src[keep], dst[keep]


def edge_features(pos: np.ndarray, coef: np.ndarray, src: np.ndarray, dst: np.ndarray,
                  radius: float) -> np.ndarray:
    """Per edge: (pos_src - pos_dst)/radius, distance/radius, coef at the source, coef at the dst."""
    rel = (pos[src] - pos[dst]) / radius
    dist = np.linalg.norm(rel, axis=1, keepdims=True)
    return np.concatenate([rel, dist, coef[src], coef[dst]], axis=1).astype(np.float32)


def edge_feat_dim(coef_dim: int, pos_dim: int = 2) -> int:
    """Width of :func:`edge_features` for ``coef_dim`` coefficient channels and ``pos_dim``
    coordinates."""
    return pos_dim + 1 + 2 * coef_dim


def build(pos: np.ndarray, x: np.ndarray, coef: np.ndarray, nodes: np.ndarray, radius: float,
          max_edges: int, rng: np.random.Generator,
          dst_mask: np.ndarray | None = None) -> SampledGraph:
    """The capped radius graph over ``nodes`` of one sample (pos, normalized x and coef rows).

    With ``dst_mask`` (one bool per sampled node) only the edges into those nodes are capped and
    featurised: the same edges the full build has into them, at a fraction of the cost.
    """
    p = pos[nodes].astype(np.float64)
    salt = draw_salt(rng)
    near_src, near_dst = radius_pairs(p, radius)
    if dst_mask is not None:
        k = dst_mask[near_dst]
        near_src, near_dst = near_src[k], near_dst[k]
    keep = cap_edges(near_src, near_dst, len(p), max_edges, salt)
    src, dst = near_src[keep], near_dst[keep]
    ef = edge_features(p, coef[nodes], src, dst, radius)
    return SampledGraph(nodes=nodes, pos=p, x=x[nodes].astype(np.float32), src=src, dst=dst,
                        efeat=ef, near_src=near_src, near_dst=near_dst)


def sample_graph(pos: np.ndarray, x: np.ndarray, coef: np.ndarray, s: int, radius: float,
                 max_edges: int, rng: np.random.Generator) -> SampledGraph:
    """Draw ``s`` nodes of one sample and build their capped radius graph."""
    return build(pos, x, coef, sample_nodes(len(pos), s, rng), radius, max_edges, rng)


def cover_groups(num_points: int, s: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random partition of all points into groups of about ``s`` (full-field inference)."""
    perm = rng.permutation(num_points)
    groups = max(1, int(round(num_points / s)))
    return np.array_split(perm, groups)
