"""The on-disk partition format (stock DGL partition files) and its writer.

Layout of a partitioning of a homogeneous graph into ``num_parts`` parts, under ``out_dir``:

- ``<graph_name>.json``: DGL's partition config: ``graph_name``, ``num_nodes``, ``num_edges``,
  ``part_method``, ``num_parts``, ``halo_hops``, ``node_map`` ``{"_N": [[lo, hi], ...]}`` and
  ``edge_map`` ``{"_N:_E:_N": [[lo, hi], ...]}`` (one half-open, contiguous id range per part, in
  part order), ``ntypes``, ``etypes``, and per part ``part-<k>`` the paths of the three files
  below, relative to the JSON. Extra keys (ignored by DGL): ``num_classes`` (integer class
  labels: the largest + 1) or ``num_targets`` (float labels: their columns, targets or 0/1
  labels), from ``ndata["label"]``, and ``dsgraph``, the integrity block (sizes and sha256 of
  every listed file, the source graph's fingerprint, the config that made the files:
  :mod:`dsgraph.partition.meta`), which every reader verifies.
- ``part<k>/graph.dgl``: part ``k``'s graph. Its owned ("inner") nodes come first, in id order,
  then its halo nodes (neighbours owned by other parts, up to ``halo_hops`` away); it holds every
  in-edge of its owned nodes (``inner_edge`` = 1: an edge belongs to its destination's part) and
  edges that reach its halo (the 1-hop set exactly: :func:`split_one_hop`). ndata: ``_ID``
  (reshuffled global id), ``inner_node`` (uint8), ``part_id``; edata: ``_ID``, ``inner_edge``
  (uint8).
- ``part<k>/node_feat.dgl``: ``_N/<key>`` for every ``ndata`` key of the input graph (``feat``,
  ``label``, the masks, ...), one row per owned node in reshuffled order, plus ``_N/orig_id``:
  the original id of each owned node, so results can be mapped back
  (:func:`dsgraph.partition.reader.orig_ids`).
- ``part<k>/edge_feat.dgl``: an edge task's ``_N:_E:_N/label``, masks and ``orig_id`` per owned
  edge in new-id order (:func:`edge_targets`; ``edge_label`` in the JSON); else empty.
- ``link_split.npz`` (link prediction only; the JSON's ``link_split`` key names it, the integrity
  block checksums it): ``train``, ``val``, ``test``, each ``(pairs, 2)`` int64 original node ids
  (src < dst) of the split's undirected edges (a directed dataset's given split, like
  ogbl-citation2: (source, target) as given); ``val`` and ``test`` pairs are in no part's graph
  (:mod:`dsgraph.data.link_split`). Evaluation negatives a dataset ships are stored beside them,
  original ids: ``val_neg_dst`` / ``test_neg_dst`` ``(pairs, K)`` destinations per positive (MRR),
  ``val_neg_pairs`` / ``test_neg_pairs`` ``(M, 2)`` shared pairs (Hits@K).
- ``user_node_ids.npz`` (datasets whose node ids are not positions, i.e. DGL CSV folders: the
  loader attaches them, :func:`dsgraph.data.csv_dataset.user_node_ids`; the JSON's
  ``user_node_ids`` key names it, the integrity block checksums it): per node type (``_N`` here)
  an int64 array, the user's id of each original node (``orig_id`` indexes it). Predictions map
  original ids through it (:func:`read_user_ids`); without it they are the ids (positions in
  the files' row order: OGB, ``.npz``, DGL binaries, chunked folders, generated graphs). A
  sidecar, not node data, so DistGraph servers never load it.
- ``partition_stats.json``: :func:`partition_stats` plus per-part counts, ``train_balance``,
  ``wall_s``, ``peak_rss_mb`` and whatever the caller passed (``python -m partition`` adds
  ``source``, the config that produced the files).

Node ids are reshuffled so part ``k`` owns a contiguous range (part-major, original order within
a part); edge ids likewise by destination part. This is exactly what stock
``dgl.distributed.load_partition`` / ``DistGraphServer`` read, and what
:mod:`dsgraph.partition.reader` relies on. Files are written into a temporary folder that is
renamed into place only when complete. Heterogeneous graphs: :mod:`dsgraph.partition.
hetero_format`, which shares this module's steps.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Iterator

import dgl
import numpy as np
import torch
from dgl import DGLGraph
from dgl.data.utils import save_tensors

from dsgraph.data.edge_targets import EDGE_KEYS, user_edges
from dsgraph.errors import DataError, StorageError, UserError
from dsgraph.fsutil import atomic_dir, check_free_space, storage_errors
from dsgraph.partition.integrity import graph_fingerprint, integrity_block, verify_files
from dsgraph.partition.meta import BLOCK, REDO, read_meta
from dsgraph.procstats import peak_rss_mb


LINK_SPLIT_FILE = "link_split.npz"  # link prediction's held-out edges (original node ids)
USER_IDS_FILE = "user_node_ids.npz"  # the user's node ids per type (the JSON's USER_IDS_KEY)
USER_IDS_KEY = "user_node_ids"


def write_partitions(g: DGLGraph, assignment: np.ndarray, out_dir: str | os.PathLike, graph_name: str,
                     halo_hops: int = 1, method: str = "custom", force: bool = False,
                     stats: dict | None = None, num_parts: int | None = None,
                     source: dict | None = None,
                     link_split: dict[str, np.ndarray] | None = None,
                     user_ids: dict[str, np.ndarray] | None = None) -> Path:
    """Write DGL partition files for ``g`` split by ``assignment``; return the JSON path.

    ``g`` is a homogeneous DGLGraph whose ndata tensors (feat, label, masks, ...) are stored per
    part. Empty parts are rejected because DGL's range partition book cannot represent them.
    ``partition_stats.json`` (see :func:`partition_stats`) is written beside the JSON, starting
    from the given ``stats`` and adding per-part counts, wall time and peak RSS. The JSON's
    integrity block records every file's size and sha256, the graph's fingerprint and
    ``source``, the config sections that made the files (:func:`dsgraph.partition.meta.
    partition_source`; None from library code). ``link_split`` (held-out edges,
    :func:`dsgraph.data.link_split.split_edges`) and ``user_ids`` (one node type) go to the
    sidecars the module docstring lists.
    """
    t0 = time.perf_counter()
    src_np, dst_np = (t.numpy() for t in g.edges())
    num_parts = check_assignment(assignment, src_np, dst_np, g.num_nodes(), num_parts, out_dir,
                                 force)
    parts = split_parts(src_np, dst_np, assignment, num_parts, halo_hops, g.num_nodes())
    meta: dict = {"graph_name": graph_name, "num_nodes": g.num_nodes(), "num_edges": g.num_edges(),
                  "part_method": method, "num_parts": num_parts, "halo_hops": halo_hops,
                  "node_map": {"_N": []}, "edge_map": {"_N:_E:_N": []},
                  "ntypes": {"_N": 0}, "etypes": {"_N:_E:_N": 0}}
    if "label" in g.ndata:  # extra key (ignored by DGL): trainers size the output layer from it
        meta.update(label_meta(g.ndata["label"]))
    if "label" in g.edata:  # an edge task's targets: sized likewise
        meta["edge_label"] = {**label_meta(g.edata["label"]), "user_edges": user_edges(g)}
    stats = {**partition_stats(g, assignment, method), **(stats or {}), "parts": []}
    check_free_space(Path(out_dir).parent, files_bytes(g, parts), "the partition files")
    with storage_errors(Path(out_dir) / graph_name, "the partition files"), \
            atomic_dir(out_dir, force=force) as tmp:
        for k in range(num_parts):
            part = parts[k]
            inner = part.ndata["inner_node"].bool()
            inner_new = part.ndata[dgl.NID][inner]
            inner_e = part.edata["inner_edge"].bool()
            inner_eids = part.edata[dgl.EID][inner_e]
            meta["node_map"]["_N"].append([int(inner_new[0]), int(inner_new[-1]) + 1])
            if inner_eids.numel():
                meta["edge_map"]["_N:_E:_N"].append([int(inner_eids[0]), int(inner_eids[-1]) + 1])
            else:
                prev = meta["edge_map"]["_N:_E:_N"][-1][1] if k else 0
                meta["edge_map"]["_N:_E:_N"].append([prev, prev])
            owned_orig = part.ndata["orig_id"][inner]
            train = int(g.ndata["train_mask"][owned_orig].sum()) if "train_mask" in g.ndata else 0
            stats["parts"].append({"part": k, "nodes": int(inner.sum()),
                                   "inner_edges": int(inner_e.sum()),
                                   "halo_nodes": int((~inner).sum()), "train_nodes": train})
            feats = {f"_N/{key}": g.ndata[key][owned_orig] for key in g.ndata.keys()}
            feats["_N/orig_id"] = owned_orig.to(torch.int64)
            meta[f"part-{k}"] = save_part(tmp, Path(out_dir), k, part, feats,
                                          edge_targets(g, part, inner_e, inner_eids))
        if link_split is not None:
            np.savez(tmp / LINK_SPLIT_FILE, **{k: np.asarray(v, dtype=np.int64)
                                              for k, v in link_split.items()})
            meta["link_split"] = LINK_SPLIT_FILE
        if user_ids is not None:  # the one type's ids, under the partition's type name
            save_user_ids(tmp, meta, {"_N": next(iter(user_ids.values()))},
                          {"_N": g.num_nodes()})
        finish_partitions(tmp, meta, graph_fingerprint(g), source, stats, t0)
    return Path(out_dir) / f"{graph_name}.json"


def check_assignment(assignment: np.ndarray, src: np.ndarray, dst: np.ndarray, num_nodes: int,
                     num_parts: int | None, out_dir: str | os.PathLike, force: bool) -> int:
    """The number of parts (default: the largest part id + 1), after refusing an existing
    ``out_dir`` without ``force``, an empty part or a part without edges (one-line UserError)."""
    if Path(out_dir).exists() and not force:  # fail before the expensive work, not after it
        raise UserError(f"{out_dir}: output folder exists; pass --force to replace it")
    if num_parts is None:
        num_parts = int(assignment.max()) + 1 if assignment.size else 1
    # minlength=num_parts: trailing empty parts must be reported, not silently dropped.
    counts = np.bincount(assignment, minlength=num_parts)
    if (counts == 0).any():
        raise UserError(f"partition: part {int(np.argmin(counts))} would be empty "
                        f"({num_nodes} nodes into {num_parts} parts); use fewer parts")
    a_src, a_dst = assignment[src], assignment[dst]
    touched = (np.bincount(a_dst, minlength=num_parts)
               + np.bincount(a_src[a_src != a_dst], minlength=num_parts))
    if (touched == 0).any():  # DGL's partition_graph_with_halo crashes on a part with no edges
        raise UserError(f"partition: part {int(np.argmin(touched))} would have no edges "
                        f"({src.shape[0]} edges into {num_parts} parts); use fewer parts")
    return num_parts


def split_parts(src: np.ndarray, dst: np.ndarray, assignment: np.ndarray, num_parts: int,
                halo_hops: int, num_nodes: int, node_type: np.ndarray | None = None,
                edge_type: np.ndarray | None = None) -> dict:
    """Part graphs with ``halo_hops``-hop halos and reshuffled ids (ndata/edata ``orig_id``:
    the ids in ``src``/``dst``'s numbering): :func:`split_one_hop` or DGL's own splitter.

    ``node_type`` / ``edge_type`` (a heterograph's homogeneous projection): new ids type-major
    within a part. split_one_hop keeps the input's order within a part, which is type-major
    already; DGL's splitter needs the types to group by them (it sorts edges in CSR order).
    """
    if halo_hops == 1:
        return split_one_hop(src, dst, assignment, num_parts)
    structure = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
    if node_type is not None:
        # int64 as dgl.to_homogeneous stores them: DGL's splitter refuses other dtypes
        structure.ndata[dgl.NTYPE] = torch.from_numpy(node_type.astype(np.int64))
        structure.edata[dgl.ETYPE] = torch.from_numpy(edge_type.astype(np.int64))
    parts, _, _ = dgl.partition_graph_with_halo(
        structure, torch.from_numpy(assignment), halo_hops, reshuffle=True)
    return parts


def edge_targets(g: DGLGraph, part: DGLGraph, inner_e: torch.Tensor,
                 inner_eids: torch.Tensor) -> dict:
    """The edge data of an edge task (:data:`EDGE_KEYS` of ``g.edata``) for the edges ``part``
    owns, in their new ids' order (DistGraph reads a partition's edge rows by id offset)."""
    keys = [key for key in EDGE_KEYS if key in g.edata] if "label" in g.edata else []
    if not keys:
        return {}
    orig = part.edata["orig_id"][inner_e][torch.argsort(inner_eids)]
    return {**{f"_N:_E:_N/{key}": g.edata[key][orig] for key in keys},
            "_N:_E:_N/orig_id": orig.to(torch.int64)}


def label_meta(label: torch.Tensor) -> dict:
    """The JSON's extra key for the labels: ``num_targets`` (float) or ``num_classes`` (int)."""
    if label.dtype.is_floating_point:  # float targets / 0/1 labels: one column each
        return {"num_targets": int(label.shape[1]) if label.dim() > 1 else 1}
    return {"num_classes": int(label.max()) + 1}


def save_part(tmp: Path, out_dir: Path, k: int, part: DGLGraph, node_feats: dict,
              edge_feats: dict) -> dict:
    """Write part ``k``'s three files under ``tmp``/part<k>; return the JSON's ``part-k`` entry.

    Drops the splitter's ``orig_id`` fields from ``part`` and stores its flags as uint8.
    """
    for data in (part.ndata, part.edata):
        if "orig_id" in data:
            del data["orig_id"]
    # Stock partition_graph stores these flags as uint8 (its RESERVED_FIELD_DTYPE).
    part.ndata["inner_node"] = part.ndata["inner_node"].to(torch.uint8)
    part.edata["inner_edge"] = part.edata["inner_edge"].to(torch.uint8)
    pdir = tmp / f"part{k}"
    pdir.mkdir()
    with _dgl_writes(out_dir, pdir):
        save_tensors(str(pdir / "node_feat.dgl"), node_feats)
        save_tensors(str(pdir / "edge_feat.dgl"), edge_feats)
        dgl.save_graphs(str(pdir / "graph.dgl"), [part])
    return {"node_feats": f"part{k}/node_feat.dgl", "edge_feats": f"part{k}/edge_feat.dgl",
            "part_graph": f"part{k}/graph.dgl"}


def save_user_ids(tmp: Path, meta: dict, ids: dict[str, np.ndarray],
                  counts: dict[str, int]) -> None:
    """Write ``ids`` (per node type, the user's id of each original node) to ``tmp`` /
    USER_IDS_FILE and name the file in ``meta``."""
    for t, values in ids.items():
        if t not in counts or np.shape(values) != (counts[t],):
            raise ValueError(f"user node ids of type {t!r}: expected {counts.get(t)} ids (one "
                             f"per node), got shape {np.shape(values)}")
    np.savez(tmp / USER_IDS_FILE, **{t: np.asarray(v, dtype=np.int64) for t, v in ids.items()})
    meta[USER_IDS_KEY] = USER_IDS_FILE


def read_user_ids(part_json: str | os.PathLike, ntype: str | None = None) -> np.ndarray | None:
    """The user's id of each original node of ``ntype`` (default: a heterogeneous
    partitioning's target type, else its one type) from the folder's USER_IDS_FILE, its size
    and sha256 verified; None where the partitioning has none (original ids are the ids)."""
    path = Path(part_json)
    meta = read_meta(path)
    rel = meta.get(USER_IDS_KEY)
    if rel is None:
        return None
    if rel not in meta[BLOCK]["files"]:
        raise DataError(f"{path}: {BLOCK}.files: expected an entry for {USER_IDS_KEY} ({rel}); "
                        f"{REDO}")
    verify_files(path, meta, [rel])
    t = ntype or meta.get("target_ntype") or next(iter(meta["ntypes"]))
    count = sum(hi - lo for lo, hi in meta["node_map"].get(t, ()))
    try:
        with np.load(path.parent / rel, allow_pickle=False) as arrays:
            ids = arrays[t] if t in arrays.files else None
    except (OSError, ValueError) as exc:  # a checksummed file: only a changed numpy fails here
        raise DataError(f"{path.parent / rel}: unreadable ({type(exc).__name__}); {REDO}") \
            from None
    if ids is None or ids.dtype != np.int64 or ids.shape != (count,):
        got = "nothing" if ids is None else f"{ids.dtype} of shape {ids.shape}"
        raise DataError(f"{path.parent / rel}: {t}: expected {count} int64 node ids, got {got}; "
                        f"{REDO}")
    return ids


def finish_partitions(tmp: Path, meta: dict, graph_fp: str, source: dict | None, stats: dict,
                      t0: float) -> None:
    """Add the integrity block and write the JSON and ``partition_stats.json`` into ``tmp``."""
    meta[BLOCK] = integrity_block(tmp, meta, graph_fp, source)
    (tmp / f"{meta['graph_name']}.json").write_text(json.dumps(meta, indent=1))
    trains = [p["train_nodes"] for p in stats["parts"]]
    stats["train_balance"] = max(trains) / max(np.mean(trains), 1e-9) if any(trains) else 1.0
    stats["wall_s"] = stats.get("wall_s", 0.0) + time.perf_counter() - t0
    stats["peak_rss_mb"] = peak_rss_mb()
    (tmp / "partition_stats.json").write_text(json.dumps(stats, indent=1))


def files_bytes(g: DGLGraph, parts: dict | None = None) -> float:
    """The partition files' size: every node's data once and each part's structure (ids and
    flags per node and edge, halos included); before the split (no ``parts``) a lower bound,
    every node and edge once."""
    node_data = 0
    for nt in g.ntypes:  # every node type's tensors (a homogeneous graph: g.ndata's)
        data = g.nodes[nt].data
        node_data += sum(data[k].numel() * data[k].element_size() for k in data.keys())
    node_data += 8 * g.num_nodes()  # orig_id
    if parts is None:
        return node_data + 25 * g.num_edges() + 17 * g.num_nodes()
    structure = sum(25 * p.num_edges() + 17 * p.num_nodes() for p in parts.values())
    return 1.1 * (node_data + structure) + (1 << 20)


@contextlib.contextmanager
def _dgl_writes(out_dir: Path, pdir: Path) -> Iterator[None]:
    """DGL's writers fail with a C++ check ("FileStream.Write incomplete"), not an OSError:
    say what happened, in one line."""
    try:
        yield
    except dgl.DGLError as exc:
        if "Write incomplete" not in str(exc):
            raise
        free = shutil.disk_usage(pdir).free
        cause = ("no space left on the device (ENOSPC)" if free < (1 << 20) else
                 "the write was cut short by the storage")
        raise StorageError(f"{out_dir.parent}: cannot write the partition files of {out_dir} "
                           f"({pdir.name}): {cause}") from None


def _stable_order(keys: np.ndarray, num_parts: int) -> np.ndarray:
    """Stable argsort of small part ids (numpy radix-sorts 16-bit keys in linear time)."""
    if num_parts < 2**15:
        keys = keys.astype(np.int16)
    return np.argsort(keys, kind="stable")


def split_one_hop(src: np.ndarray, dst: np.ndarray, assignment: np.ndarray, num_parts: int) -> dict:
    """Part graphs with 1-hop halos, as ``dgl.partition_graph_with_halo(g, a, 1, reshuffle=True)``.

    Same result, vectorized: new node ids are part-major (original order within a part), each
    edge belongs to its destination's part and gets a part-major new id. Part ``k``'s graph holds
    its owned nodes first (local id = new id - range start), then its halo nodes (every neighbour,
    in- or out-, owned elsewhere), all in-edges of owned nodes (``inner_edge`` = 1) and the
    out-edges from owned to halo nodes. ndata: ``_ID``, ``inner_node``, ``part_id``, ``orig_id``;
    edata: ``_ID``, ``inner_edge``, ``orig_id``. DGL's version spends most of its time in
    per-part sorts; this one is several times faster on 1M-node graphs.
    """

    n = assignment.shape[0]
    new2orig = _stable_order(assignment, num_parts)
    orig2new = np.empty(n, dtype=np.int64)
    orig2new[new2orig] = np.arange(n, dtype=np.int64)
    node_start = np.concatenate([[0], np.cumsum(np.bincount(assignment, minlength=num_parts))])
    p_dst = assignment[dst]
    e_new2orig = _stable_order(p_dst, num_parts)  # new edge id -> original edge id
    edge_start = np.concatenate([[0], np.cumsum(np.bincount(p_dst, minlength=num_parts))])
    nsrc = orig2new[src[e_new2orig]]  # endpoints in new ids, edges in new-id order
    ndst = orig2new[dst[e_new2orig]]
    p_src = assignment[src[e_new2orig]]
    cross = np.flatnonzero(p_src != p_dst[e_new2orig])  # new ids of edges between parts
    cross = cross[_stable_order(p_src[cross], num_parts)]  # grouped by the source's part
    cross_start = np.concatenate([[0], np.cumsum(np.bincount(p_src[cross], minlength=num_parts))])
    del p_dst, p_src
    parts = {}
    for k in range(num_parts):
        lo, hi = int(node_start[k]), int(node_start[k + 1])
        in_eid = np.arange(edge_start[k], edge_start[k + 1], dtype=np.int64)
        out_eid = cross[cross_start[k]:cross_start[k + 1]]
        e_src = np.concatenate([nsrc[in_eid], nsrc[out_eid]])
        e_dst = np.concatenate([ndst[in_eid], ndst[out_eid]])
        # Halo = endpoints outside [lo, hi); a mark array finds them in O(n + edges), sorted.
        seen = np.zeros(n, dtype=bool)
        seen[e_src] = True
        seen[e_dst] = True
        seen[lo:hi] = False
        halo = np.flatnonzero(seen)
        del seen
        nid = np.concatenate([np.arange(lo, hi, dtype=np.int64), halo])
        local = np.empty(n, dtype=np.int64)  # new id -> local id (only part k's nodes are read)
        local[nid] = np.arange(nid.shape[0], dtype=np.int64)
        sub = dgl.graph((torch.from_numpy(local[e_src]), torch.from_numpy(local[e_dst])),
                        num_nodes=nid.shape[0])
        del local
        eid = np.concatenate([in_eid, out_eid])
        inner_node = np.zeros(nid.shape[0], dtype=np.uint8)
        inner_node[: hi - lo] = 1
        inner_edge = np.zeros(eid.shape[0], dtype=np.uint8)
        inner_edge[: in_eid.shape[0]] = 1
        sub.ndata[dgl.NID] = torch.from_numpy(nid)
        sub.ndata["inner_node"] = torch.from_numpy(inner_node)
        sub.ndata["orig_id"] = torch.from_numpy(new2orig[nid])
        sub.ndata["part_id"] = torch.from_numpy(assignment[new2orig[nid]].astype(np.int64))
        sub.edata[dgl.EID] = torch.from_numpy(eid)
        sub.edata["inner_edge"] = torch.from_numpy(inner_edge)
        sub.edata["orig_id"] = torch.from_numpy(e_new2orig[eid])
        parts[k] = sub
    return parts


def partition_stats(g: DGLGraph, assignment: np.ndarray, method: str) -> dict:
    """Edge cut (edges whose endpoints lie in different parts) and node balance of an assignment."""
    src, dst = (t.numpy() for t in g.edges())
    return assignment_stats(src, dst, g.num_nodes(), assignment, method)


def assignment_stats(src: np.ndarray, dst: np.ndarray, num_nodes: int, assignment: np.ndarray,
                     method: str) -> dict:
    """:func:`partition_stats` of the graph with edges ``src`` -> ``dst``."""
    num_parts = int(assignment.max()) + 1
    counts = np.bincount(assignment, minlength=num_parts)
    cut = int((assignment[src] != assignment[dst]).sum())
    return {"method": method, "num_parts": num_parts, "num_nodes": int(num_nodes),
            "num_edges": int(src.shape[0]), "edge_cut": cut,
            "edge_cut_ratio": cut / max(src.shape[0], 1),
            "node_balance": float(counts.max() / counts.mean())}
