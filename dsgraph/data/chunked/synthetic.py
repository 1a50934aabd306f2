"""Synthetic community graphs generated chunk by chunk, at sizes that never fit in memory.

The same family as :mod:`dsgraph.data.synthetic` (a degree-corrected stochastic block model:
communities are the classes, Pareto(``degree_alpha``) expected degrees, a ``homophily`` share of
edge endpoints drawn inside the source's community, features ``feat_signal * mu[label] +
N(0, 1)``), but streamed: randomness is drawn per fixed internal block of ``BLOCK_ROWS`` nodes
from ``np.random.default_rng([seed, stream, block])`` and only then cut or merged into chunks
of ``chunk_rows``, so the graph depends on ``dataset.seed`` alone, never on the chunk size.
Memory: two per-node arrays (12 bytes a node: nodes in community order, int32, and their
cumulative expected degrees, float64; ~30 bytes a node while they are built) plus the chunk
being produced. It is not the same graph as the in-memory generator's
for the same seed (that one draws from one generator in one go).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, TypeVar

import numpy as np

from dsgraph.config import DatasetConfig
from dsgraph.data.chunked.write import write_chunked
from dsgraph.errors import ConfigError
from dsgraph.fsutil import check_free_space

BLOCK_ROWS = 1 << 16  # nodes per internal random block: fixes the graph, whatever chunk_rows
DEFAULT_CHUNK_ROWS = 1 << 19  # rows per written chunk: 256 MiB of 128-wide float32 features
# The generator's random streams (the second entry of every seed sequence).
LABELS, THETA, EDGES, FEAT, SPLIT_COUNTS, SPLIT_ORDER, MU = range(7)
# Undirected pairs drawn per wanted pair (as the in-memory generator): self-loops and
# duplicates are dropped.
OVERSAMPLE = 1.04
MASKS = ("train_mask", "val_mask", "test_mask")
PROGRESS_EVERY_S = 5.0

T = TypeVar("T")


def _check(cfg: DatasetConfig) -> None:
    """Only class labels stream: other targets need every node's neighbours at once."""
    if cfg.target != "class":
        raise ConfigError(f"dataset.target: the chunked synthetic generator writes class labels "
                          f"only; expected 'class', got {cfg.target!r}")


def _blocks(n: int) -> Iterator[tuple[int, int, int]]:
    """``(block index, first node, end node)`` of every internal block."""
    for b, lo in enumerate(range(0, n, BLOCK_ROWS)):
        yield b, lo, min(lo + BLOCK_ROWS, n)


def _rng(cfg: DatasetConfig, stream: int, block: int = 0) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, stream, block])


def _block_labels(cfg: DatasetConfig, b: int, size: int) -> np.ndarray:
    return _rng(cfg, LABELS, b).integers(0, cfg.num_classes, size)


def _block_theta(cfg: DatasetConfig, b: int, size: int) -> np.ndarray:
    """Uncapped expected degrees of block ``b`` (heavy tail, minimum 1)."""
    return _rng(cfg, THETA, b).pareto(cfg.degree_alpha - 1.0, size) + 1.0


def _split_counts(cfg: DatasetConfig) -> np.ndarray:
    """``(blocks, 4)`` nodes per block in train / val / test / none: exact totals overall, each
    block's share drawn as a random permutation of all nodes would give it."""
    n = cfg.num_nodes
    want = [int(round(f * n)) for f in (cfg.train_frac, cfg.val_frac, cfg.test_frac)]
    left = np.array(want + [n - sum(want)], dtype=np.int64)
    if left[3] < 0:  # the config checks each fraction, not their sum
        raise ConfigError(f"dataset.train_frac + val_frac + test_frac: expected at most 1, got "
                          f"{cfg.train_frac + cfg.val_frac + cfg.test_frac:g}")
    out = []
    for b, lo, hi in _blocks(n):
        take = _rng(cfg, SPLIT_COUNTS, b).multivariate_hypergeometric(left, hi - lo)
        left -= take
        out.append(take)
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def _node_block(cfg: DatasetConfig, b: int, lo: int, hi: int, mu: np.ndarray,
                counts: np.ndarray) -> dict[str, np.ndarray]:
    """Node data of internal block ``b``."""
    size = hi - lo
    labels = _block_labels(cfg, b, size).astype(np.int64)
    feat = _rng(cfg, FEAT, b).standard_normal((size, cfg.feat_dim), dtype=np.float32)
    feat += np.float32(cfg.feat_signal) * mu[labels]
    which = _rng(cfg, SPLIT_ORDER, b).permutation(np.repeat(np.arange(4), counts))
    out = {"feat": feat, "label": labels}
    for i, name in enumerate(MASKS):
        out[name] = which == i
    return out


def _rechunk(blocks: Iterable[dict[str, np.ndarray]], chunk_rows: int
             ) -> Iterator[dict[str, np.ndarray]]:
    """Blocks of any sizes (dicts of arrays of equal length) regrouped into chunks of exactly
    ``chunk_rows`` rows (the last one shorter; none empty).

    A chunk inside one block is a view of it; others are filled into one buffer allocated per
    chunk, so a chunk costs its own size once (no list of pieces beside a concatenated copy).
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    out: dict[str, np.ndarray] | None = None
    held = 0
    for block in blocks:
        size = len(next(iter(block.values())))
        start = 0
        while start < size:
            if held == 0 and size - start >= chunk_rows:
                yield {k: v[start:start + chunk_rows] for k, v in block.items()}
                start += chunk_rows
                continue
            if out is None:
                out = {k: np.empty((chunk_rows, *v.shape[1:]), v.dtype) for k, v in block.items()}
            take = min(chunk_rows - held, size - start)
            for k, v in block.items():
                out[k][held:held + take] = v[start:start + take]
            held += take
            start += take
            if held == chunk_rows:
                yield out
                out, held = None, 0
    if out is not None:
        yield {k: v[:held] for k, v in out.items()}


def node_blocks(cfg: DatasetConfig, chunk_rows: int = DEFAULT_CHUNK_ROWS
                ) -> Iterator[dict[str, np.ndarray]]:
    """Node data in chunks of ``chunk_rows`` nodes, in node-id order: ``feat`` float32
    (rows, feat_dim), ``label`` int64, disjoint ``train_mask`` / ``val_mask`` / ``test_mask``
    (bool) holding exactly ``round(frac * num_nodes)`` nodes each."""
    _check(cfg)
    mu = _rng(cfg, MU).standard_normal((cfg.num_classes, cfg.feat_dim)).astype(np.float32)
    counts = _split_counts(cfg)
    raw = (_node_block(cfg, b, lo, hi, mu, counts[b]) for b, lo, hi in _blocks(cfg.num_nodes))
    yield from _rechunk(raw, chunk_rows)


class _Communities:
    """What drawing an edge endpoint needs: nodes grouped by community and the running sum of
    their expected degrees (the only per-node arrays the edge stream keeps)."""

    def __init__(self, cfg: DatasetConfig) -> None:
        n, k = cfg.num_nodes, cfg.num_classes
        labels = np.empty(n, dtype=np.int16 if k <= np.iinfo(np.int16).max else np.int32)
        theta = np.empty(n, dtype=np.float64)
        for b, lo, hi in _blocks(n):
            labels[lo:hi] = _block_labels(cfg, b, hi - lo)
            theta[lo:hi] = _block_theta(cfg, b, hi - lo)
        # Hubs capped as the in-memory generator caps them, so the largest degree stays realistic.
        self.theta_cap = float(n ** 0.5 * theta.mean())
        np.minimum(theta, self.theta_cap, out=theta)
        ids = np.int32 if n - 1 <= np.iinfo(np.int32).max else np.int64
        self.order = np.argsort(labels, kind="stable").astype(ids)
        self.cum = theta[self.order]
        del theta
        np.cumsum(self.cum, out=self.cum)
        ends = np.cumsum(np.bincount(labels, minlength=k))
        starts = np.concatenate([[0], ends[:-1]])
        base = np.concatenate([[0.0], self.cum])
        self.comm_lo, self.comm_hi = base[starts], base[ends]
        self.total = float(self.cum[-1])

    def pick(self, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Node ids drawn with probability proportional to expected degree within ``[lo, hi)``
        of the running sum (one community's range, or everything)."""
        r = lo + rng.random(lo.shape[0]) * (hi - lo)
        # Sorted keys let numpy's binary search start from the previous hit: ~8x faster on
        # 10M nodes, where unsorted lookups miss the cache at every step.
        by = np.argsort(r)
        pos = np.empty(r.shape[0], dtype=np.int64)
        pos[by] = np.searchsorted(self.cum, r[by], side="right")
        np.minimum(pos, self.cum.shape[0] - 1, out=pos)
        return self.order[pos].astype(np.int64)


def _edge_block(cfg: DatasetConfig, com: _Communities, b: int, lo: int, hi: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Edges whose drawing endpoint lies in block ``b``: both directions of each pair."""
    n = cfg.num_nodes
    rng = _rng(cfg, EDGES, b)
    theta = np.minimum(_block_theta(cfg, b, hi - lo), com.theta_cap)
    # Each node draws Poisson(its share) pairs: in total n * avg_degree / 2 undirected pairs,
    # i.e. a mean in-degree of avg_degree once both directions are written.
    pairs = n * cfg.avg_degree / 2 * OVERSAMPLE
    draws = rng.poisson(theta * (pairs / com.total))
    src = np.repeat(np.arange(lo, hi, dtype=np.int64), draws)
    intra = rng.random(src.shape[0]) < cfg.homophily
    c = _block_labels(cfg, b, hi - lo)[src - lo]
    dst = com.pick(np.where(intra, com.comm_lo[c], 0.0), np.where(intra, com.comm_hi[c],
                                                                  com.total), rng)
    keep = src != dst
    a, z = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    key = np.unique(a * n + z)
    a, z = key // n, key % n
    return np.concatenate([a, z]), np.concatenate([z, a])


def edge_chunks(cfg: DatasetConfig, chunk_rows: int = DEFAULT_CHUNK_ROWS
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(src, dst)`` int64 chunks of ``chunk_rows`` edges: each undirected pair in both
    directions, no self-loops, mean in-degree ~``avg_degree``.

    Pairs are deduplicated within the internal block that draws them; a pair drawn from both
    of its endpoints' blocks stays twice (rare: it takes two draws landing on the same pair,
    which happens between hubs). That is harmless: METIS input is deduplicated, and DGL graphs
    allow multi-edges (sampling sees such a neighbour a little more often).
    """
    _check(cfg)
    com = _Communities(cfg)
    raw = (_edge_block(cfg, com, b, lo, hi) for b, lo, hi in _blocks(cfg.num_nodes))
    for chunk in _rechunk(({"src": s, "dst": d} for s, d in raw), chunk_rows):
        yield chunk["src"], chunk["dst"]


class _Progress:
    """Prints rows passed through so far, at most every ``PROGRESS_EVERY_S`` seconds."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.last = self.start

    def track(self, what: str, items: Iterable[T], rows: Callable[[T], int],
              total: Optional[int] = None) -> Iterator[T]:
        done = said = 0
        for item in items:
            yield item
            done += rows(item)
            now = time.monotonic()
            if now - self.last >= PROGRESS_EVERY_S:
                self.last, said = now, done
                of = f" of {total:,}" if total else ""
                print(f"  {what}: {done:,}{of} written, {now - self.start:.0f} s", flush=True)
        if said != done or not done:
            print(f"  {what}: {done:,} written, {time.monotonic() - self.start:.0f} s", flush=True)


# Bytes an edge takes on disk, by format (numpy: two int64; csv: two decimal numbers).
EDGE_BYTES = {"numpy": 16, "parquet": 12, "csv": 20}


def estimated_bytes(cfg: DatasetConfig, edge_format: str = "parquet") -> float:
    """About how many bytes the chunked folder of ``cfg`` takes (refusing a full disk early)."""
    n = cfg.num_nodes
    node_bytes = n * (4 * cfg.feat_dim + 8 + len(MASKS))
    return node_bytes + n * cfg.avg_degree * EDGE_BYTES.get(edge_format, 16)


def generate_chunked(cfg: DatasetConfig, out: str | os.PathLike,
                     chunk_rows: int = DEFAULT_CHUNK_ROWS, edge_format: str = "parquet",
                     node_format: str = "numpy", force: bool = False,
                     graph_name: str = "graph") -> Path:
    """Write the synthetic graph of ``cfg`` as a DGL chunked-format folder at ``out``, one chunk
    at a time; returns metadata.json's path."""
    _check(cfg)
    check_free_space(Path(out).parent, estimated_bytes(cfg, edge_format),
                     f"the chunked graph ({cfg.num_nodes:,} nodes)")
    progress = _Progress()
    edges = progress.track("edges", edge_chunks(cfg, chunk_rows), lambda e: len(e[0]))
    nodes = progress.track("nodes", node_blocks(cfg, chunk_rows), lambda d: len(d["label"]),
                           cfg.num_nodes)
    return write_chunked(out, cfg.num_nodes, edges, nodes, graph_name=graph_name,
                         edge_format=edge_format, node_format=node_format, force=force)

