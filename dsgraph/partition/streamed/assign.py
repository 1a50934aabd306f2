"""Structure-only node assignment of a graph read in chunks, within a memory budget.

Only the edges (chunk by chunk, several passes) and ``train_mask`` are read, never features.
The symmetric, deduplicated, loop-free CSR METIS needs is built out of core
(:mod:`dsgraph.partition.streamed.csr_file`); then one of three assigners runs:

* ``metis``: :func:`dsgraph.partition.assign.metis_assignment` on that CSR (same options,
  constraints and rebalancing as the in-memory path) when pymetis's estimated memory fits.
* ``coarsened_metis``: beyond the budget. Size-capped label propagation clusters the nodes
  (:mod:`dsgraph.partition.streamed.coarsen`), the cluster graph (edge weights = fine edges between
  clusters) is sparsified to the entries the budget allows, METIS partitions it with vertex
  weights summing each cluster's constraint columns (``balance_weights``), the result is
  projected back, capped by ``rebalance`` and improved by balance-respecting label-propagation
  moves (:mod:`dsgraph.partition.streamed.refine`). Its memory grows with the nodes, not the edges.
* ``random``: :func:`dsgraph.partition.assign.random_assignment` (no structure read).

pymetis memory (``pymetis._internal._idx_type_width()`` is 64: METIS's idx_t is int64, so its
copies of the graph take 8 bytes an entry). Measured peak RSS of ``pymetis.part_graph`` above
the RSS before the call, synthetic DC-SBM graphs (40 communities), 4 balance constraints, k=4:

=========  ===========  ========  ===============
nodes      entries      MiB       bytes / entry
=========  ===========  ========  ===============
100k       0.98M        76        81
500k       2.05M        186       95
500k       5.06M        472       98
500k       9.99M        1066      112
1M         10.2M        1231      126
2M         20.5M        2632      134
=========  ===========  ========  ===============

(k=2 is within 1%.) Hence the estimate ``METIS_BYTES_PER_ENTRY * entries +
METIS_BYTES_PER_NODE * nodes``: 140 bytes an entry (the largest figure, rounded up; it grows
slowly with size) and 40 bytes a node (vertex-weight columns, partition vectors).

The coarsened path against in-memory ``metis_assignment`` (same graphs, avg degree 10, 2 cores
shared with other jobs; RSS = peak above the RSS after building the graph; budget = 0.45x the
METIS path's estimate, which keeps 31-53% of the cluster graph's entries): edge cut 1.00-1.04x
at 200k-2M nodes and 2 parts, 1.02-1.07x at 4 parts; peak RSS 0.30-0.45x (1M: 401-466 vs
1324-1328 MiB; 2M: 1042-1091 vs 2809-2817 MiB); time 0.9-2.7x (noisy). 10M nodes / 103M
edges, ``memory_mb=5120``: 2.68M clusters, 27.5M of 88M entries kept; 4 parts: cut ratio
0.1150 (in-memory METIS: 0.1130 at 1M, 0.1144 at 2M), 4628 MiB, 163 s; 2 parts: 0.0770
(0.0752, 0.0751), 4659 MiB, 234 s; balance 1.046, train 1.010. With a budget of ~4 entries a
cluster (``memory_mb=1``) the cut is 1.9-2.5x METIS's: the sparsified cluster graph is then
nearly a forest. Restreaming LDG/Fennel was not tried.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from dsgraph.data.chunked.contract import GraphChunks, iter_edges, read_node_key
from dsgraph.errors import ConfigError, DataError
from dsgraph.partition.assign import (
    TRAIN_BALANCE,
    balance_weights,
    metis_assignment,
    metis_parts,
    random_assignment,
    rebalance,
)
from dsgraph.partition.streamed.coarsen import coarse_graph, label_propagation, sparsify
from dsgraph.partition.streamed.csr_file import CsrFile, build_csr, graph_entries
from dsgraph.partition.streamed.refine import class_caps, refine

METIS_BYTES_PER_ENTRY = 140
METIS_BYTES_PER_NODE = 40
# Arrays over the fine nodes the coarsened path holds at once (indptr, labels, cluster sizes,
# assignment, classes, constraint columns): bytes a node, measured as the path's peak RSS above
# its baseline divided by nodes at 200k-1M nodes.
NODE_BYTES = 120
# Row-block temporaries of the CSR build, clustering and refinement (sorts of 2-4M entries):
# the part of that peak that does not grow with the graph, measured at 200k-2M nodes.
BLOCK_MB = 200
# Nodes per cluster at most: coarse graphs 1/CLUSTER_CAP of the nodes or more.
CLUSTER_CAP = 32
LP_ROUNDS = 4
REFINE_ROUNDS = 4
MAX_BALANCE = 1.05
METHODS = ("metis", "random")


class _Progress:
    """Prints a step's progress at most every few seconds (a 10M-node run takes minutes)."""

    def __init__(self, every_s: float = 3.0) -> None:
        self.every_s = every_s
        self.t0 = time.perf_counter()
        self.last = -every_s

    def __call__(self, msg: str, force: bool = False) -> None:
        """Print ``msg`` with the elapsed time if enough time passed since the last line."""
        now = time.perf_counter()
        if force or now - self.last >= self.every_s:
            print(f"[assign {now - self.t0:7.1f}s] {msg}", flush=True)
            self.last = now


def available_mb() -> float:
    """This host's available memory in MiB (MemAvailable)."""
    import psutil

    return psutil.virtual_memory().available / 2 ** 20


def metis_mb(num_nodes: int, entries: int) -> float:
    """Estimated peak MiB of pymetis on a graph of ``entries`` adjacency entries."""
    return (METIS_BYTES_PER_ENTRY * entries + METIS_BYTES_PER_NODE * num_nodes) / 2 ** 20


def _train_mask(graph: GraphChunks) -> np.ndarray | None:
    """The ``train_mask`` node key as bool, or None when the graph has none."""
    spec = next((k for k in graph.node_keys() if k.name == "train_mask"), None)
    if spec is None:
        return None
    if spec.row_shape != ():
        raise DataError(f"train_mask: expected one value per node, got rows of shape "
                        f"{spec.row_shape}")
    return read_node_key(graph, "train_mask").astype(bool)


def assignment_stats(graph: GraphChunks, assign: np.ndarray, num_parts: int,
                     train: np.ndarray | None) -> dict:
    """Edge cut over the input's directed edges (as ``partition_stats``), node/train balance."""
    cut = 0
    for _, src, dst in iter_edges(graph):
        cut += int((assign[src] != assign[dst]).sum())
    counts = np.bincount(assign, minlength=num_parts)
    out = {"edge_cut": cut, "edge_cut_ratio": cut / max(graph.num_edges, 1),
           "node_balance": float(counts.max() / max(counts.mean(), 1e-12))}
    if train is not None and train.any():
        tc = np.bincount(assign[train], minlength=num_parts)
        out["train_balance"] = float(tc.max() / tc.mean())
    return out


def assign_streamed(graph: GraphChunks, num_parts: int, *, method: str = "metis",
                    memory_mb: float | None = None, seed: int = 0, balance_train: bool = True,
                    balance_edges: bool = True, work_dir: str | Path
                    ) -> tuple[np.ndarray, dict]:
    """Assign every node of a chunk-read graph to one of ``num_parts`` parts; returns the
    assignment (int64) and an info dict (assigner, why, estimates, edge cut, balance)."""
    if method not in METHODS:
        raise ConfigError(f"partition.method: expected one of {', '.join(METHODS)}, got {method!r}")
    if not isinstance(num_parts, (int, np.integer)) or num_parts < 1:
        raise ConfigError(f"partition.num_parts: expected an integer >= 1, got {num_parts!r}")
    n = int(graph.num_nodes)
    log = _Progress()
    t0 = time.perf_counter()
    budget = float(available_mb() if memory_mb is None or memory_mb <= 0 else memory_mb)
    train = _train_mask(graph)
    if method == "random" or num_parts == 1:
        assign = random_assignment(n, num_parts, seed)
        info = {"assigner": "random", "reason": "method random" if method == "random"
                else "one part", "memory_mb": budget}
    else:
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="stream_assign.", dir=work_dir))
        try:
            assign, info = _structured(graph, num_parts, budget, seed, balance_train,
                                       balance_edges, train, scratch, log)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    info.update(assignment_stats(graph, assign, num_parts, train))
    info["wall_s"] = time.perf_counter() - t0
    log(f"{info['assigner']}: edge cut {info['edge_cut']:,} "
        f"({info['edge_cut_ratio']:.4f}), node balance {info['node_balance']:.3f}", force=True)
    return assign, info


def _structured(graph: GraphChunks, num_parts: int, budget: float, seed: int,
                balance_train: bool, balance_edges: bool, train: np.ndarray | None,
                scratch: Path, log: _Progress) -> tuple[np.ndarray, dict]:
    """Build the CSR out of core, then METIS it whole or coarsened, whichever fits ``budget``."""
    n = int(graph.num_nodes)
    log(f"building the symmetric CSR of {n:,} nodes, {graph.num_edges:,} edges", force=True)
    csr = build_csr(n, graph_entries(graph, log), scratch, "adj", log=log)
    adj = csr.to_scipy()
    node_mb = NODE_BYTES * n / 2 ** 20 + BLOCK_MB
    need = metis_mb(n, csr.nnz) + node_mb
    info: dict = {"memory_mb": budget, "structure_mb": need, "entries": csr.nnz,
                  "idx_t_bits": _idx_bits()}
    weights = balance_weights(adj, train, balance_train, balance_edges)
    tmask = train if balance_train else None
    if need <= budget:
        log(f"METIS on the whole graph ({csr.nnz:,} entries, ~{need:,.0f} MiB of "
            f"{budget:,.0f})", force=True)
        assign = metis_assignment(adj, num_parts, weights, seed, MAX_BALANCE,
                                  train_mask=tmask, train_balance=TRAIN_BALANCE)
        info.update(assigner="metis", reason=f"estimated {need:.0f} MiB <= budget {budget:.0f}")
        return assign, info
    info.update(assigner="coarsened_metis",
                reason=f"estimated {need:.0f} MiB > budget {budget:.0f}")
    assign, extra = _coarsened(csr, num_parts, budget - node_mb, seed, weights, tmask,
                               scratch, log)
    info.update(extra)
    return assign, info


def _idx_bits() -> int:
    """Bits of pymetis's idx_t (64 in the pinned wheels)."""
    import pymetis._internal as internal

    return int(internal._idx_type_width())


def _coarsened(csr: CsrFile, num_parts: int, coarse_mb: float, seed: int,
               weights: np.ndarray | None, train: np.ndarray | None, scratch: Path,
               log: _Progress) -> tuple[np.ndarray, dict]:
    """Cluster, METIS the sparsified cluster graph, project back, cap and refine."""
    n = csr.num_rows
    cap = int(max(1, min(CLUSTER_CAP, n // (num_parts * 64))))
    log(f"clustering {n:,} nodes (at most {cap} a cluster)", force=True)
    labels = label_propagation(csr, cap, LP_ROUNDS, seed, log=log)
    nc = int(labels.max()) + 1
    coarse = coarse_graph(csr, labels, scratch, log)
    max_entries = int(max(coarse_mb * 2 ** 20 - METIS_BYTES_PER_NODE * nc, 0)
                      // METIS_BYTES_PER_ENTRY)
    max_entries = max(max_entries, 4 * nc)  # below ~4 a node METIS sees mostly trees
    sparse, big_w = sparsify(coarse, max_entries, seed, scratch)
    log(f"coarse graph: {nc:,} clusters, {coarse.nnz:,} entries, {sparse.nnz:,} kept "
        f"(W={big_w:.2f})", force=True)
    if weights is None:
        cweights = np.bincount(labels, minlength=nc).astype(np.int64)[:, None]
    else:
        cweights = np.stack([np.bincount(labels, weights=weights[:, j], minlength=nc)
                             for j in range(weights.shape[1])], axis=1).astype(np.int64)
    cols = [c for c in range(cweights.shape[1]) if cweights[:, c].any()]  # METIS: no 0 totals
    indices, eweights = sparse.read(0, sparse.nnz)
    cpart = metis_parts(sparse.indptr, indices, num_parts, cweights[:, cols], seed, eweights)
    del indices, eweights
    assign = cpart[labels]
    del labels, cweights
    adj = csr.to_scipy()
    if train is not None and 0 < int(train.sum()) < n:
        assign = rebalance(adj, assign, num_parts, TRAIN_BALANCE, members=train)
        assign = rebalance(adj, assign, num_parts, MAX_BALANCE, members=~train)
        classes = train.astype(np.int64)
        caps = class_caps(classes, 2, num_parts, [MAX_BALANCE, TRAIN_BALANCE])
    else:
        assign = rebalance(adj, assign, num_parts, MAX_BALANCE)
        classes = np.zeros(n, dtype=np.int64)
        caps = class_caps(classes, 1, num_parts, [MAX_BALANCE])
    assign = refine(csr, assign, num_parts, classes, caps, REFINE_ROUNDS, log)
    return assign, {"clusters": nc, "cluster_cap": cap, "coarse_entries": coarse.nnz,
                    "coarse_entries_kept": sparse.nnz, "sparsify_w": big_w}
