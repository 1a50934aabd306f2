"""Partition a graph: assign its nodes (METIS or random) and write the partition files."""
from __future__ import annotations

import os
import time
from pathlib import Path

from dgl import DGLGraph

from dsgraph.partition.assign import (
    balance_weights,
    metis_assignment,
    random_assignment,
    symmetric_csr,
)
from dsgraph.fsutil import check_free_space
from dsgraph.partition.format import files_bytes, write_partitions
from dsgraph.partition.hetero_format import (
    homogeneous_projection,
    homogeneous_train_mask,
    write_hetero_partitions,
)


def partition_graph(g: DGLGraph, num_parts: int, out_dir: str | os.PathLike,
                    graph_name: str = "graph", method: str = "metis", halo_hops: int = 1,
                    seed: int = 0, force: bool = False, balance_train: bool = True,
                    balance_edges: bool = True, extra_stats: dict | None = None,
                    source: dict | None = None, link_split: dict | None = None,
                    user_ids: dict | None = None) -> Path:
    """Assign nodes with METIS (pymetis) or at random and write DGL partition files.

    ``source`` (the config sections that asked for this partitioning) goes into the JSON's
    integrity block, so runs with other settings are refused; ``link_split`` (held-out edges of
    link prediction) and ``user_ids`` (the user's node ids, :func:`dsgraph.data.csv_dataset.
    user_node_ids`) are stored beside the JSON.
    """
    t0 = time.perf_counter()
    # before the assignment, which can take long: the files hold at least every node and edge
    check_free_space(Path(out_dir).parent, files_bytes(g), "the partition files")
    if method == "random":
        assign = random_assignment(g.num_nodes(), num_parts, seed)
    else:
        src, dst = (t.numpy() for t in g.edges())
        adj = symmetric_csr(src, dst, g.num_nodes())
        train = g.ndata["train_mask"].numpy() if "train_mask" in g.ndata else None
        weights = balance_weights(adj, train, balance_train, balance_edges)
        assign = metis_assignment(adj, num_parts, weights, seed,
                                  train_mask=train if balance_train else None)
    return write_partitions(g, assign, out_dir, graph_name, halo_hops, method, force,
                            stats={**(extra_stats or {}), "wall_s": time.perf_counter() - t0},
                            num_parts=num_parts, source=source, link_split=link_split,
                            user_ids=user_ids)


def partition_hetero_graph(g: DGLGraph, num_parts: int, out_dir: str | os.PathLike,
                           graph_name: str = "graph", method: str = "metis", halo_hops: int = 1,
                           seed: int = 0, force: bool = False, balance_train: bool = True,
                           balance_edges: bool = True, extra_stats: dict | None = None,
                           source: dict | None = None, user_ids: dict | None = None) -> Path:
    """:func:`partition_graph` for a heterograph: assign its nodes on the symmetric
    homogeneous projection and write DGL's heterogeneous partition files.

    METIS balances the target type's training nodes (placed in homogeneous order) against all
    other nodes, of every type, as :func:`balance_weights` does for a homogeneous graph.
    ``user_ids``: the user's node ids per type, stored beside the JSON.
    """
    t0 = time.perf_counter()
    check_free_space(Path(out_dir).parent, files_bytes(g), "the partition files")
    if method == "random":
        assign = random_assignment(g.num_nodes(), num_parts, seed)
    else:
        src, dst, _, _ = homogeneous_projection(g)
        adj = symmetric_csr(src, dst, g.num_nodes())
        train = homogeneous_train_mask(g)
        weights = balance_weights(adj, train, balance_train, balance_edges)
        assign = metis_assignment(adj, num_parts, weights, seed,
                                  train_mask=train if balance_train else None)
    return write_hetero_partitions(g, assign, out_dir, graph_name, halo_hops, method, force,
                                   stats={**(extra_stats or {}),
                                          "wall_s": time.perf_counter() - t0},
                                   num_parts=num_parts, source=source, user_ids=user_ids)
