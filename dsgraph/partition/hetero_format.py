"""Partition files of a heterogeneous graph: DGL 2.1.0's heterogeneous partition format.

What ``dgl.distributed.partition_graph`` writes for a ``dgl.heterograph`` (and
``load_partition`` / ``DistGraphServer`` read), with the homogeneous writer's additions
(:mod:`dsgraph.partition.format`: integrity block, ``partition_stats.json``, atomic output):

- ids: every node has a *homogeneous id*, its position in ``dgl.to_homogeneous(g)``'s order
  (type-major in ``g.ntypes`` order, per-type id within a type; edges likewise in
  ``g.canonical_etypes`` order). The assignment is given in that order. Reshuffled ids are
  part-major and, within a part, type-major, so each type's owned nodes of each part are one
  contiguous range (edges: by their destination's part, then edge type).
- ``<graph_name>.json``: ``node_map`` ``{ntype: [[lo, hi] per part]}`` and ``edge_map``
  ``{"src:rel:dst": [[lo, hi] per part]}`` in reshuffled homogeneous ids (a type a part owns
  none of gets an empty range at its place), ``ntypes`` ``{ntype: id}``, ``etypes``
  ``{"src:rel:dst": id}``; extra keys ``num_classes`` / ``num_targets`` of the target type's
  labels and ``target_ntype`` (the one node type with ``label``).
- ``part<k>/graph.dgl``: a homogeneous DGLGraph as :func:`dsgraph.partition.format.
  split_one_hop` makes it, plus ndata ``_TYPE`` (node type id) and edata ``_TYPE`` (edge type
  id), both int32 as DGL saves them (RESERVED_FIELD_DTYPE names both "_TYPE": int32 wins).
- ``part<k>/node_feat.dgl``: ``<ntype>/<key>`` for every node tensor of every type, one row per
  owned node of that type in reshuffled order, and ``<ntype>/orig_id`` (per-type original ids)
  for every type. ``part<k>/edge_feat.dgl``: ``<src:rel:dst>/<key>`` likewise for edge tensors.
- ``user_node_ids.npz`` (DGL CSV folders): the user's ids of each type's original nodes, as
  :mod:`dsgraph.partition.format` describes; predictions read the target type's.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import dgl
import numpy as np
import torch
from dgl import DGLGraph

from dsgraph.data.hetero.contract import target_ntype
from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_dir, check_free_space, storage_errors
from dsgraph.partition.format import (
    assignment_stats,
    check_assignment,
    files_bytes,
    finish_partitions,
    label_meta,
    save_part,
    save_user_ids,
    split_parts,
)
from dsgraph.partition.integrity import graph_fingerprint


def etype_str(etype: tuple[str, str, str]) -> str:
    """A canonical edge type as DGL's partition JSON names it: ``"src:rel:dst"``."""
    return ":".join(etype)


def homogeneous_projection(g: DGLGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, node_type, edge_type)``: the edges in homogeneous ids (int64) and the type id
    of each homogeneous node and edge (int32), in ``dgl.to_homogeneous(g)``'s order."""
    node_off = type_offsets([g.num_nodes(nt) for nt in g.ntypes])
    src, dst = [], []
    for etype in g.canonical_etypes:
        u, v = g.edges(etype=etype, order="eid")
        src.append(u.numpy().astype(np.int64) + node_off[g.get_ntype_id(etype[0])])
        dst.append(v.numpy().astype(np.int64) + node_off[g.get_ntype_id(etype[2])])
    node_type = np.repeat(np.arange(len(g.ntypes), dtype=np.int32), np.diff(node_off))
    edge_type = np.repeat(np.arange(len(g.canonical_etypes), dtype=np.int32),
                          [g.num_edges(e) for e in g.canonical_etypes])
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(src) if src else empty, np.concatenate(dst) if dst else empty,
            node_type, edge_type)


def type_offsets(counts: list[int]) -> np.ndarray:
    """``[0, c0, c0 + c1, ...]``: where each type's homogeneous ids start."""
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def homogeneous_train_mask(g: DGLGraph) -> np.ndarray | None:
    """The target type's ``train_mask`` placed in homogeneous order (False elsewhere); None
    when there is no target type or it has no ``train_mask``."""
    target = target_ntype(g, required=False)
    if target is None or "train_mask" not in g.nodes[target].data:
        return None
    off = type_offsets([g.num_nodes(nt) for nt in g.ntypes])
    t = g.get_ntype_id(target)
    mask = np.zeros(int(off[-1]), dtype=bool)
    mask[off[t]:off[t + 1]] = g.nodes[target].data["train_mask"].numpy().astype(bool)
    return mask


def _type_ranges(counts: np.ndarray, names: list[str]) -> dict[str, list[list[int]]]:
    """``{name: [[lo, hi] per part]}`` for ``counts[part, type]`` items laid out part-major,
    type-major within a part (reshuffled id order)."""
    ends = np.cumsum(counts.reshape(-1)).reshape(counts.shape)
    starts = ends - counts
    return {name: [[int(starts[k, t]), int(ends[k, t])] for k in range(counts.shape[0])]
            for t, name in enumerate(names)}


def _tensors(data) -> dict[str, torch.Tensor]:
    """A DGL node or edge data view as a plain dict (its ``values()`` are storage columns)."""
    return {key: data[key] for key in data.keys()}


def _edge_data_bytes(g: DGLGraph) -> int:
    """Bytes of every edge tensor (stored per part beside the node data)."""
    return sum(v.numel() * v.element_size()
               for e in g.canonical_etypes for v in _tensors(g.edges[e].data).values())


def write_hetero_partitions(g: DGLGraph, assignment: np.ndarray, out_dir: str | os.PathLike,
                            graph_name: str, halo_hops: int = 1, method: str = "custom",
                            force: bool = False, stats: dict | None = None,
                            num_parts: int | None = None, source: dict | None = None,
                            user_ids: dict[str, np.ndarray] | None = None) -> Path:
    """Write DGL's heterogeneous partition files for ``g`` split by ``assignment`` (one part
    per node in ``dgl.to_homogeneous(g)``'s order); return the JSON path.

    Refusals, ``partition_stats.json``, the integrity block (``source``: the config that made the
    files), ``user_ids`` (per node type) and atomic output as :func:`dsgraph.partition.format.
    write_partitions`.
    """
    t0 = time.perf_counter()
    assignment = np.asarray(assignment, dtype=np.int64)
    n, ntypes, etypes = g.num_nodes(), list(g.ntypes), list(g.canonical_etypes)
    if assignment.shape != (n,):
        raise UserError(f"partition: assignment: expected one part per node of the heterograph "
                        f"({n} nodes), got shape {tuple(assignment.shape)}")
    src, dst, node_type, edge_type = homogeneous_projection(g)
    num_parts = check_assignment(assignment, src, dst, n, num_parts, out_dir, force)
    target = target_ntype(g, required=False)
    parts = split_parts(src, dst, assignment, num_parts, halo_hops, n, node_type, edge_type)
    T, E = len(ntypes), len(etypes)
    # Reshuffled ids are part-major, type-major within a part: counts per (part, type) give
    # every range.
    node_counts = np.bincount(assignment * T + node_type, minlength=num_parts * T)
    edge_counts = np.bincount(assignment[dst] * E + edge_type, minlength=num_parts * E)
    node_counts = node_counts.reshape(num_parts, T)
    edge_counts = edge_counts.reshape(num_parts, E)
    meta: dict = {"graph_name": graph_name, "num_nodes": n, "num_edges": g.num_edges(),
                  "part_method": method, "num_parts": num_parts, "halo_hops": halo_hops,
                  "node_map": _type_ranges(node_counts, ntypes),
                  "edge_map": _type_ranges(edge_counts, [etype_str(e) for e in etypes]),
                  "ntypes": {nt: g.get_ntype_id(nt) for nt in ntypes},
                  "etypes": {etype_str(e): g.get_etype_id(e) for e in etypes}}
    if target is not None:  # extra keys (ignored by DGL): the output layer and its node type
        meta.update(label_meta(g.nodes[target].data["label"]))
        meta["target_ntype"] = target
    train = homogeneous_train_mask(g)
    node_off = type_offsets([g.num_nodes(nt) for nt in ntypes])
    edge_off = type_offsets([g.num_edges(e) for e in etypes])
    stats = {**assignment_stats(src, dst, n, assignment, method), **(stats or {}),
             "ntypes": ntypes, "target_ntype": target, "parts": []}
    check_free_space(Path(out_dir).parent, files_bytes(g, parts) + _edge_data_bytes(g),
                     "the partition files")
    with storage_errors(Path(out_dir) / graph_name, "the partition files"), \
            atomic_dir(out_dir, force=force) as tmp:
        for k in range(num_parts):
            part = parts[k]
            orig = part.ndata["orig_id"].numpy()  # homogeneous original ids
            orig_e = part.edata["orig_id"].numpy()
            part.ndata[dgl.NTYPE] = torch.from_numpy(node_type[orig])
            part.edata[dgl.ETYPE] = torch.from_numpy(edge_type[orig_e])
            inner = part.ndata["inner_node"].numpy().astype(bool)
            owned = orig[inner]  # in reshuffled id order: type-major within the part
            owned_e = orig_e[part.edata["inner_edge"].numpy().astype(bool)]
            feats = {}
            for t, nt in enumerate(ntypes):
                ids = torch.from_numpy(owned[node_type[owned] == t] - node_off[t])
                for key, value in _tensors(g.nodes[nt].data).items():
                    feats[f"{nt}/{key}"] = value[ids]
                feats[f"{nt}/orig_id"] = ids
            efeats = {}
            for e, etype in enumerate(etypes):
                ids = torch.from_numpy(owned_e[edge_type[owned_e] == e] - edge_off[e])
                for key, value in _tensors(g.edges[etype].data).items():
                    efeats[f"{etype_str(etype)}/{key}"] = value[ids]
            halo = orig[~inner]
            stats["parts"].append({
                "part": k, "nodes": int(inner.sum()),
                "nodes_per_type": dict(zip(ntypes, map(int, node_counts[k]))),
                "inner_edges": int(owned_e.shape[0]), "halo_nodes": int(halo.shape[0]),
                "halo_nodes_per_type": dict(zip(ntypes, map(int, np.bincount(
                    node_type[halo], minlength=T)))),
                "train_nodes": int(train[owned].sum()) if train is not None else 0})
            meta[f"part-{k}"] = save_part(tmp, Path(out_dir), k, part, feats, efeats)
        if user_ids is not None:
            save_user_ids(tmp, meta, user_ids, {nt: g.num_nodes(nt) for nt in ntypes})
        finish_partitions(tmp, meta, graph_fingerprint(g), source, stats, t0)
    return Path(out_dir) / f"{graph_name}.json"
