"""Heterogeneous graphs from a user's files: OGB folders in the ogbn-mag layout and DGL CSV
folders with several node / edge types, returned in :mod:`dsgraph.data.hetero.contract`'s contract.

OGB (read with pandas, never with the ``ogb`` package, as :mod:`dsgraph.data.ogb` does):
``raw/num-node-dict.csv.gz`` (a row of type names, a row of counts), ``raw/triplet-type-list
.csv.gz`` (``src_type,relation,dst_type`` rows), ``raw/relations/<src>___<rel>___<dst>/`` with
``edge.csv.gz`` and ``num-edge-list.csv.gz``, ``raw/node-feat/<type>/node-feat.csv.gz`` for the
types with features, ``raw/node-label/<type>/node-label.csv.gz`` for the target type (one type;
NaN = unlabelled), and the official split ``split/<scheme>/[<type>/]{train,valid,test}.csv.gz``
of target-type ids. Node ids are the row indices of the files. Other files (``node_year``,
``edge_reltype``) are ignored.

DGL CSV: ``meta.yaml`` with ``node_data: [{file_name, ntype}, ...]`` and ``edge_data:
[{file_name, etype: [src, rel, dst]}, ...]``, read by DGL's ``CSVDataset`` with
:mod:`dsgraph.data.csv_dataset`'s column parsing and cache. Node columns: ``feat`` on the types
that have features; ``label`` on exactly one type, the target type, with all three masks or none
(then ``dataset.split``); other columns, and every edge column, are ignored. A type's node i is
the one with the i-th smallest ``node_id`` of that type (DGL's numbering).

Either format: ``add_reverse_edges`` ``"auto"`` or True adds the reverse relations, False keeps
the relations as stored; ``split`` (train, val, test fractions of the labelled target nodes,
drawn with ``seed``) replaces the files' split.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import dgl
import numpy as np
import pandas as pd
from dgl.data import CSVDataset

from dsgraph.config.fields import MAX_NODES
from dsgraph.data.arrays import (Sources, check_feat, check_id_range, label_columns,
                                  resolve_masks, user_path)
from dsgraph.data.csv_dataset import (META, NodeColumns, _CachedCSVDataset, attach_user_ids,
                                      csv_node_ids, files_digest, listed_files, parse_one_graph,
                                      read_meta)
from dsgraph.data.hetero.contract import Etype, assemble
from dsgraph.data.ogb import _int_column, _one_graph, _read_table, split_folder, split_masks
from dsgraph.data.split import MASKS
from dsgraph.errors import DataError

# Heterogeneous OGB node-property datasets by name: (add_inverse_edge, official split folder),
# as ogb.KNOWN; only the split folder is used (reverse relations follow add_reverse_edges).
HETERO_KNOWN = {"ogbn-mag": (False, "time")}
HETERO_ALIASES = {"mag": "ogbn-mag"}


def load_ogb_hetero(path: str | os.PathLike | None, add_reverse_edges: str | bool = "auto",
                    split: Optional[Sequence[float]] = None, seed: int = 0) -> dgl.DGLGraph:
    """Read and check an OGB heterogeneous node-property folder (ogbn-mag layout); return the
    heterograph."""
    root = user_path(path, "OGB dataset folder", "the folder holding raw/ and split/", folder=True)
    raw = root / "raw"
    if not raw.is_dir():
        raise DataError(f"{raw}: folder not found; an OGB dataset folder holds raw/ "
                        f"(num-node-dict.csv.gz, triplet-type-list.csv.gz, relations/, ...) "
                        f"and split/")
    counts = _node_counts(raw / "num-node-dict.csv.gz")
    edges = {c: _relation(raw, c, counts) for c in _triplets(raw, counts)}
    feats = {}
    for t, p in _typed_files(raw / "node-feat", "node-feat.csv.gz", counts):
        feat = _read_table(p, f"{t} node features", dtype=np.float32)
        if feat.shape[0] != counts[t]:
            raise DataError(f"{p}: expected {counts[t]} rows ({t} nodes in num-node-dict.csv.gz), "
                            f"got {feat.shape[0]}")
        check_feat(Sources(str(p)), feat)
        feats[t] = feat
    labels = _typed_files(raw / "node-label", "node-label.csv.gz", counts)
    if len(labels) != 1:
        found = [t for t, _ in labels] or "none"
        raise DataError(f"{raw / 'node-label'}: expected labels of one node type (the target "
                        f"type) in <type>/node-label.csv.gz, got {found}")
    target, label_file = labels[0]
    n = counts[target]
    values = _read_table(label_file, f"{target} node labels")
    if values.shape[0] != n:
        raise DataError(f"{label_file}: expected {n} rows (one label per {target} node), got "
                        f"{values.shape[0]}")
    nd = {"label": label_columns(str(label_file), values, "class")}
    where = Sources(str(label_file))
    if split is None:
        masks, files = _official_split(root, target, n)
        nd.update(masks)
        where.update(files)
    masks = resolve_masks(where, nd, n, split, seed)
    reverse = add_reverse_edges is not False  # "auto" and True
    return assemble(edges, counts, feats, target, nd["label"], masks, reverse)


def _node_counts(p: Path) -> dict[str, int]:
    """Node types and their counts from ``num-node-dict.csv.gz`` (header row, count row)."""
    values = _read_table(p, "node types and counts")
    if values.ndim != 2 or values.shape[0] != 2:
        raise DataError(f"{p}: expected 2 rows (node type names, then their counts), got "
                        f"{values.shape[0] if values.ndim == 2 else 0}")
    counts: dict[str, int] = {}
    for name, count in zip(values[0], values[1]):
        name, text = str(name).strip(), str(count).strip()
        if not text.isdigit() or int(text) > MAX_NODES:  # a hostile count allocates nothing
            raise DataError(f"{p}: expected a node count in [0, {MAX_NODES}] under {name!r}, "
                            f"got {text[:40]!r}")
        if name in counts:
            raise DataError(f"{p}: node type {name!r} is listed twice")
        counts[name] = int(text)
    return counts


def _triplets(raw: Path, counts: dict[str, int]) -> list[Etype]:
    """The canonical edge types of ``triplet-type-list.csv.gz``, checked against the node
    types; relation names unique."""
    p = raw / "triplet-type-list.csv.gz"
    values = _read_table(p, "edge types (source type, relation, destination type)")
    if values.size == 0:
        raise DataError(f"{p}: expected at least one edge type, got none")
    if values.shape[1] != 3:
        raise DataError(f"{p}: expected 3 columns (source type, relation, destination type), "
                        f"got {values.shape[1]}")
    out: list[Etype] = []
    for line, row in enumerate(values, 1):
        s, r, d = (str(v).strip() for v in row)
        for t in (s, d):
            if t not in counts:
                raise DataError(f"{p}: line {line}: node type {t!r} is not in "
                                f"num-node-dict.csv.gz ({', '.join(counts)})")
        if any(r == c[1] for c in out):
            raise DataError(f"{p}: line {line}: relation {r!r} is listed twice; expected "
                            f"relation names unique across the graph")
        out.append((s, r, d))
    return out


def _relation(raw: Path, c: Etype, counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """One relation's edges from ``relations/<s>___<r>___<d>/``, checked against its edge count
    and each end's node count."""
    folder = raw / "relations" / "___".join(c)
    num = folder / "num-edge-list.csv.gz"
    m = _one_graph(num, _int_column(num, _read_table(num, "edge counts"), "edge counts"), "edge")
    p = folder / "edge.csv.gz"
    edges = _read_table(p, "edges (source, target node ids)")
    if edges.size == 0:
        edges = np.zeros((0, 2), dtype=np.int64)
    if edges.shape[1] != 2:
        raise DataError(f"{p}: expected 2 columns (source, target node ids), got "
                        f"{edges.shape[1]}")
    if edges.shape[0] != m:
        raise DataError(f"{p}: expected {m} edges ({num.name}), got {edges.shape[0]} rows")
    if not np.issubdtype(edges.dtype, np.integer):
        raise DataError(f"{p}: expected integer node ids, got dtype {edges.dtype}")
    for col, (key, t) in enumerate((("src", c[0]), ("dst", c[2]))):
        check_id_range(str(p), key, edges[:, col], counts[t],
                       f"the number of {t} nodes in num-node-dict.csv.gz")
    return edges[:, 0], edges[:, 1]


def _typed_files(folder: Path, name: str, counts: dict[str, int]) -> list[tuple[str, Path]]:
    """``(type, folder/type/name)`` for each type subfolder of ``folder`` (none if absent)."""
    if not folder.is_dir():
        return []
    out = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if sub.name not in counts:
            raise DataError(f"{sub}: node type {sub.name!r} is not in num-node-dict.csv.gz "
                            f"({', '.join(counts)})")
        out.append((sub.name, sub / name))
    return out


def _official_split(root: Path, target: str, n: int) -> tuple[dict[str, np.ndarray],
                                                                dict[str, str]]:
    """Masks from ``split/<scheme>/<target>/`` (ogbn-mag) or ``split/<scheme>/`` id lists."""
    folder = split_folder(root, HETERO_KNOWN, HETERO_ALIASES)
    if (folder / target).is_dir():
        folder = folder / target
    return split_masks(folder, n, f"{target} node ids")


# --- DGL CSV --------------------------------------------------------------------------------

class _HeteroCSV(_CachedCSVDataset):
    """:class:`_CachedCSVDataset` (cache outside the user's folder) with a parser per type."""

    def __init__(self, data_path: str, cache_path: Path, node_files: dict[str, str]) -> None:
        self._cache_path = cache_path  # read by save_path during CSVDataset.__init__
        # The parent's __init__ wires one node file; this calls DGL's with one parser per type.
        CSVDataset.__init__(self, data_path, verbose=False,
                            ndata_parser={t: NodeColumns(f) for t, f in node_files.items()},
                            edata_parser=_no_columns)


def _no_columns(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Edge columns are not used by heterogeneous node tasks: parse none."""
    return {}


def load_csv_hetero(path: str | os.PathLike | None, cache_dir: str | os.PathLike = "data",
                    split: Optional[Sequence[float]] = None, seed: int = 0,
                    add_reverse_edges: str | bool = "auto") -> dgl.DGLGraph:
    """Read and check a DGL CSV folder with several node / edge types; return the
    heterograph."""
    folder = user_path(path, "DGL CSV dataset folder", f"the folder holding {META}", folder=True)
    nodes, edges, names = _hetero_meta(folder)
    cache = Path(cache_dir) / f"csv-hetero-{files_digest(folder, names)}"
    node_files = {t: str(folder / f) for t, f in nodes.items()}
    g = parse_one_graph(folder, lambda: _HeteroCSV(str(folder), cache, node_files),
                        lambda _: _unknown_endpoint(folder, nodes, edges))
    labelled = [t for t in nodes if "label" in g.nodes[t].data]
    if len(labelled) != 1:
        raise DataError(f"{folder / META}: expected a label column in the node file of one type "
                        f"(the target type), got {len(labelled)}: "
                        f"{', '.join(node_files[t] for t in labelled) or 'none'}")
    target = labelled[0]
    feats = {}
    for t, f in node_files.items():
        data = {k: v.numpy() for k, v in g.nodes[t].data.items()}
        if t != target and any(k in data for k in MASKS):
            raise DataError(f"{f}: {next(k for k in MASKS if k in data)} on node type {t!r}, "
                            f"which has no label column; masks belong to the target type")
        if "feat" in data:
            feat = data["feat"][:, None] if data["feat"].ndim == 1 else data["feat"]
            check_feat(Sources(f), feat)
            feats[t] = feat
    n = g.num_nodes(target)
    nd = {k: v.numpy() for k, v in g.nodes[target].data.items() if k in ("label", *MASKS)}
    label = nd["label"]
    nd["label"] = label_columns(node_files[target], label[:, None] if label.ndim == 1 else label,
                                "class")
    where = Sources(node_files[target])
    if split is None and all(k in nd for k in MASKS):
        total = sum(nd[k].astype(np.int64) for k in MASKS)
        if (total > 1).any():
            first = int(np.flatnonzero(total > 1)[0])
            raise DataError(f"{where.default}: {target} node {first} is in several of "
                            f"train_mask, val_mask, test_mask; expected disjoint masks")
    masks = resolve_masks(where, nd, n, split, seed)
    counts = {t: g.num_nodes(t) for t in g.ntypes}
    arrays = {c: tuple(x.numpy() for x in g.edges(etype=c)) for c in g.canonical_etypes}
    reverse = add_reverse_edges is not False  # "auto" and True
    _, meta = read_meta(folder)  # checked by _hetero_meta: each item names its type once
    ids = {}
    for item in meta["node_data"]:
        t = str(item.get("ntype", "_V"))
        ids[t] = csv_node_ids(folder, meta, item, counts[t])
    return attach_user_ids(assemble(arrays, counts, feats, target, nd["label"], masks, reverse),
                           ids)


def _hetero_meta(folder: Path) -> tuple[dict[str, str], dict[Etype, str], list[str]]:
    """Node file per type, edge file per canonical edge type and every file ``meta.yaml``
    names, checked: types declared once, edge ends declared, relation names unique."""
    meta_path, meta = read_meta(folder)
    nodes: dict[str, str] = {}
    for item in meta["node_data"]:
        t = str(item.get("ntype", "_V"))  # DGL's default type name
        if t in nodes:
            raise DataError(f"{meta_path}: node_data: node type {t!r} is listed twice")
        nodes[t] = str(item["file_name"])
    edges: dict[Etype, str] = {}
    for item in meta["edge_data"]:
        etype = item.get("etype", ["_V", "_E", "_V"])
        if not (isinstance(etype, list) and len(etype) == 3):
            raise DataError(f"{meta_path}: edge_data: {item['file_name']}: expected etype "
                            f"[source type, relation, destination type], got {etype!r}")
        c = (str(etype[0]), str(etype[1]), str(etype[2]))
        for t in (c[0], c[2]):
            if t not in nodes:
                raise DataError(f"{meta_path}: edge_data: {item['file_name']}: node type {t!r} "
                                f"has no node_data entry ({', '.join(nodes)})")
        if any(c[1] == other[1] for other in edges):
            raise DataError(f"{meta_path}: edge_data: relation {c[1]!r} is listed twice; "
                            f"expected relation names unique across the graph")
        edges[c] = str(item["file_name"])
    return nodes, edges, listed_files(folder, meta, [*nodes.values(), *edges.values()])


def _unknown_endpoint(folder: Path, nodes: dict[str, str], edges: dict[Etype, str]
                      ) -> DataError:
    """The error for an edge naming a node id its type's node file lacks (found by a rescan:
    DGL's KeyError names only the id)."""
    for (s, _, d), name in edges.items():
        try:
            df = pd.read_csv(folder / name)
            for col, t in (("src_id", s), ("dst_id", d)):
                known = pd.read_csv(folder / nodes[t], usecols=["node_id"])["node_id"]
                bad = ~df[col].isin(known)
                if bad.any():
                    first = int(np.flatnonzero(bad.to_numpy())[0])
                    return DataError(f"{folder / name}: {col} names node id "
                                     f"{df[col].iloc[first]!r} at line {first + 2}, which "
                                     f"{nodes[t]} ({t} nodes) does not list")
        except (OSError, ValueError, KeyError, pd.errors.ParserError):
            continue
    return DataError(f"{folder}: an edge names a node id that its type's node file does not list")
