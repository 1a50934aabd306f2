"""OGB node-property-prediction folders read from their raw files (no ``ogb`` package needed);
link-property folders (``ogbl-*``) are :mod:`dsgraph.data.ogb_link`'s, which reuses the readers
here.

``dataset.path`` is the folder the ``ogb`` package lays out (``ogbn_arxiv/``, say, or ``arxiv/``
as the downloaded zip unpacks): ``raw/`` holds either the CSV layout (``edge.csv.gz``,
``num-node-list.csv.gz``, ``num-edge-list.csv.gz``, ``node-feat.csv.gz``,
``node-label.csv.gz``) or the binary one (``data.npz`` with ``edge_index``, ``num_nodes_list``,
``num_edges_list``, ``node_feat``; ``node-label.npz`` with ``node_label``), and
``split/<name>/{train,valid,test}.csv.gz`` list the official split's node ids. Labels are N x 1
class ids (``dataset.target: class``; NaN for an unlabelled node, label -1 here, in no mask) or
N x L: ogbn-proteins' 112 0/1 labels (``dataset.target: multilabel``), or float targets
(``regression``). Reverse edges are added where the dataset's convention asks (OGB's
``add_inverse_edge``: ogbn-products and ogbn-proteins).

A dataset without node features (ogbn-proteins) gets them derived as OGB's proteins examples
do: the mean of each node's incoming edge features (``edge-feat.csv.gz`` / ``edge_feat``, over
the edges as trained, reverse edges included), then a one-hot of its species
(``node_species.csv.gz``, or ``species.csv.gz`` as some releases name it / ``node_species``).

The files are read with pandas / numpy (``allow_pickle=False``), never with the ``ogb`` loader:
it asks on stdin when a release file is missing, downloads when a raw file is missing and
``torch.load``s its ``processed/`` cache, which can run arbitrary code.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import dgl
import numpy as np
import pandas as pd

from dsgraph.data.arrays import Sources, finish, label_columns, read_npz, short_error, user_path
from dsgraph.errors import DataError

# Per dataset (by OGB name): add_inverse_edge and the official split's folder, from OGB's
# nodeproppred/master.csv.
KNOWN = {"ogbn-arxiv": (False, "time"), "ogbn-products": (True, "sales_ranking"),
         "ogbn-proteins": (True, "species"), "ogbn-papers100m": (False, "time")}
# Folder names the downloaded zips unpack to.
ALIASES = {"arxiv": "ogbn-arxiv", "products": "ogbn-products", "proteinfunc": "ogbn-proteins",
           "papers100m-bin": "ogbn-papers100m"}
SPLIT_FILES = {"train_mask": "train", "val_mask": "valid", "test_mask": "test"}
# Files of OGB's heterogeneous layout (ogbn-mag): several node and edge types.
HETERO_MARKERS = ("num-node-dict.csv.gz", "triplet-type-list.csv.gz", "relations")


def ogb_name(root: Path, known: dict = KNOWN, aliases: dict = ALIASES) -> Optional[str]:
    """The OGB dataset a folder holds, by its name (``ogbn_arxiv``, ``ogbn-arxiv``, ``arxiv``),
    looked up in ``known`` (by OGB name) and ``aliases`` (zip folder names)."""
    name = root.resolve().name.lower().replace("_", "-")
    for alias, full in aliases.items():
        if name == alias or (alias == "proteinfunc" and name.startswith("proteinfunc")):
            return full
    return name if name in known else None


def reverse_edges_for(root: Path, setting: str | bool, known: dict = KNOWN,
                      aliases: dict = ALIASES) -> bool:
    """Whether to add reverse edges: ``setting`` if true/false, else the dataset's convention."""
    if isinstance(setting, bool):
        return setting
    name = ogb_name(root, known, aliases)
    if name is None:
        raise DataError(f"{root}: not a known OGB dataset name ({', '.join(sorted(known))}), so "
                        f"its reverse-edge convention is unknown; set dataset.add_reverse_edges "
                        f"to true (undirected graph stored one way) or false")
    return known[name][0]


def load_ogb(path: str | os.PathLike | None, split: Optional[Sequence[float]] = None,
             seed: int = 0, add_reverse_edges: str | bool = "auto",
             target: str = "class") -> dgl.DGLGraph:
    """Read and check an OGB node-property-prediction folder; return the DGLGraph.

    ``split`` (train, val, test fractions, drawn with ``seed`` among labelled nodes) replaces the
    official split and is required when the folder has none; ``target`` is what the labels hold
    (``dataset.target``).
    """
    root = user_path(path, "OGB dataset folder", "the folder holding raw/ and split/", folder=True)
    raw = root / "raw"
    if not raw.is_dir():
        raise DataError(f"{raw}: folder not found; an OGB dataset folder holds raw/ (edge.csv.gz, "
                        f"node-feat.csv.gz, ... or data.npz) and split/")
    for marker in HETERO_MARKERS:
        if (raw / marker).exists():
            raise DataError(f"{raw / marker}: a heterogeneous OGB dataset (several node and edge "
                            f"types, like ogbn-mag); dsgraph trains on homogeneous graphs")
    reverse = reverse_edges_for(root, add_reverse_edges)
    if (raw / "data.npz").exists():
        src, dst, feat, n, where, extra = read_binary(raw)
    else:
        src, dst, feat, n, where = read_csv_layout(raw)
        extra = None
    if feat is None:
        feat, where["feat"] = _derived_features(raw, n, src, dst, reverse, extra)
    label, where["label"] = _read_labels(raw, n, target)
    nd = {"feat": feat, "label": label}
    if split is None:
        masks, files = _official_split(root, n)
        nd.update(masks)
        where.update(files)
    return finish(where, src, dst, nd, split, seed, reverse, unlabelled_ok=True, target=target)


def _need(p: Path) -> Path:
    if not p.is_file():
        raise DataError(f"{p}: file not found (part of the OGB raw layout)")
    return p


def _read_table(p: Path, what: str, dtype=None) -> np.ndarray:
    """A headerless (gzipped) CSV file as a 2-D array; unreadable content is one DataError."""
    try:
        return pd.read_csv(_need(p), header=None, dtype=dtype).to_numpy()
    except DataError:
        raise
    except pd.errors.EmptyDataError:
        return np.zeros((0, 0), dtype=dtype or np.int64)
    except (OSError, ValueError, EOFError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise DataError(f"{p}: not a readable CSV of {what} ({short_error(exc)})") from None


def _int_column(p: Path, values: np.ndarray, what: str) -> np.ndarray:
    """The single integer column of a list file (``num-node-list``, a split file)."""
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    if values.ndim != 2 or values.shape[1] != 1:
        raise DataError(f"{p}: expected one column of {what}, got {values.shape[1]} columns")
    if not np.issubdtype(values.dtype, np.integer):
        raise DataError(f"{p}: expected integer {what}, got dtype {values.dtype}")
    return values[:, 0].astype(np.int64)


def _one_graph(p: Path, counts: np.ndarray, what: str) -> int:
    """The one entry of a per-graph count list (a graph-property dataset holds many)."""
    if counts.shape[0] != 1:
        raise DataError(f"{p}: expected one graph (a node-property dataset), got "
                        f"{counts.shape[0]} entries")
    if counts[0] < 0:
        raise DataError(f"{p}: expected a {what} count >= 0, got {int(counts[0])}")
    return int(counts[0])


def read_csv_layout(raw: Path) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray], int,
                                         Sources]:
    """Edges, features (None without ``node-feat.csv.gz``) and the node count of the CSV
    layout, each checked against the others."""
    nodes_file, edges_file = raw / "num-node-list.csv.gz", raw / "num-edge-list.csv.gz"
    n = _one_graph(nodes_file, _int_column(nodes_file, _read_table(nodes_file, "node counts"),
                                           "node counts"), "node")
    m = _one_graph(edges_file, _int_column(edges_file, _read_table(edges_file, "edge counts"),
                                           "edge counts"), "edge")
    edge_file = raw / "edge.csv.gz"
    edges = _read_table(edge_file, "edges (source, target node ids)")
    if edges.size == 0:
        edges = np.zeros((0, 2), dtype=np.int64)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise DataError(f"{edge_file}: expected 2 columns (source, target node ids), got "
                        f"{edges.shape[1]}")
    if edges.shape[0] != m:
        raise DataError(f"{edge_file}: expected {m} edges ({edges_file.name}), got "
                        f"{edges.shape[0]} rows")
    feat_file = raw / "node-feat.csv.gz"
    feat = None
    if feat_file.is_file():
        feat = _read_table(feat_file, "node features", dtype=np.float32)
        if feat.shape[0] != n:
            raise DataError(f"{feat_file}: expected {n} rows ({nodes_file.name}), got "
                            f"{feat.shape[0]}")
    where = Sources(str(raw), feat=str(feat_file), src=str(edge_file), dst=str(edge_file))
    return edges[:, 0], edges[:, 1], feat, n, where


def _npz(p: Path, keys: Sequence[str], optional: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Named arrays of an ``.npz`` (``optional`` ones where present); object arrays (pickles)
    are refused, never loaded."""
    def select(names: list[str]) -> Sequence[str]:
        missing = [k for k in keys if k not in names]
        if missing:
            raise DataError(f"{p}: missing key {missing[0]!r}; expected keys " + ", ".join(keys))
        return [*keys, *(k for k in optional if k in names)]

    return read_npz(_need(p), select)[1]


def read_binary(raw: Path) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray], int, Sources,
                                     dict[str, np.ndarray]]:
    """Edges, features (None without ``node_feat``), the node count of the binary layout
    (``data.npz``) and the arrays features can be derived from (``edge_feat``,
    ``node_species``)."""
    p = raw / "data.npz"
    z = _npz(p, ("edge_index", "num_nodes_list", "num_edges_list"),
             optional=("node_feat", "edge_feat", "node_species"))
    n = _one_graph(p, np.atleast_1d(z["num_nodes_list"]), "node")
    m = _one_graph(p, np.atleast_1d(z["num_edges_list"]), "edge")
    ei = z["edge_index"]
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise DataError(f"{p}: edge_index: expected shape (2, edges), got {tuple(ei.shape)}")
    if ei.shape[1] != m:
        raise DataError(f"{p}: edge_index: expected {m} edges (num_edges_list), got "
                        f"{ei.shape[1]}")
    feat = z.get("node_feat")
    if feat is not None:
        if feat.ndim >= 1 and feat.shape[0] != n:
            raise DataError(f"{p}: node_feat: expected {n} rows (num_nodes_list), got "
                            f"{feat.shape[0]}")
        if np.issubdtype(feat.dtype, np.integer):  # OGB stores some features as integers
            feat = feat.astype(np.float32)
    where = Sources(str(p))
    extra = {k: z[k] for k in ("edge_feat", "node_species") if k in z}
    return ei[0], ei[1], feat, n, where, extra


def _derived_features(raw: Path, n: int, src: np.ndarray, dst: np.ndarray, reverse: bool,
                      binary: Optional[dict[str, np.ndarray]]) -> tuple[np.ndarray, str]:
    """Node features of a dataset that has none (ogbn-proteins): the mean incoming edge
    features, then a species one-hot (see the module docstring); and the files they came from."""
    if binary is not None:
        where = str(raw / "data.npz")
        edge_feat, species = binary.get("edge_feat"), binary.get("node_species")
        edge_where, species_where = f"{where}: edge_feat", f"{where}: node_species"
    else:
        edge_file = raw / "edge-feat.csv.gz"
        species_file = next((f for f in (raw / "node_species.csv.gz", raw / "species.csv.gz")
                             if f.is_file()), raw / "node_species.csv.gz")
        edge_feat = (_read_table(edge_file, "edge features", dtype=np.float32)
                     if edge_file.is_file() else None)
        species = _read_table(species_file, "node species") if species_file.is_file() else None
        edge_where, species_where = str(edge_file), str(species_file)
    if edge_feat is None and species is None:
        if binary is not None:
            raise DataError(f"{raw / 'data.npz'}: missing key 'node_feat' (and no edge_feat or "
                            f"node_species to derive node features from)")
        raise DataError(f"{raw / 'node-feat.csv.gz'}: file not found (and no edge-feat.csv.gz "
                        f"or node_species.csv.gz to derive node features from)")
    parts, files = [], []
    if edge_feat is not None:
        parts.append(_mean_incoming(edge_where, edge_feat, src, dst, n, reverse))
        files.append(edge_where)
    if species is not None:
        parts.append(_one_hot(species_where, species, n))
        files.append(species_where)
    return np.concatenate(parts, axis=1).astype(np.float32), " + ".join(files)


def _mean_incoming(where: str, edge_feat: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int,
                   reverse: bool) -> np.ndarray:
    """Each node's mean incoming edge feature (zeros for a node without in-edges); with
    ``reverse`` every edge also enters its source."""
    if edge_feat.ndim == 1:
        edge_feat = edge_feat[:, None]
    if edge_feat.ndim != 2 or edge_feat.shape[0] != src.shape[0]:
        raise DataError(f"{where}: expected {src.shape[0]} rows (one per edge), got shape "
                        f"{tuple(edge_feat.shape)}")
    if not np.isfinite(edge_feat).all():
        raise DataError(f"{where}: expected finite edge features, got NaN/inf")
    into = np.concatenate([dst, src]) if reverse else dst
    values = np.concatenate([edge_feat, edge_feat]) if reverse else edge_feat
    into = into.astype(np.int64)
    if into.size and (into.min() < 0 or into.max() >= n):
        return np.zeros((n, values.shape[1]))  # the edge checks name the bad id
    count = np.bincount(into, minlength=n).astype(np.float64)
    sums = np.stack([np.bincount(into, weights=values[:, c].astype(np.float64), minlength=n)
                     for c in range(values.shape[1])], axis=1)
    return sums / np.maximum(count, 1.0)[:, None]


def _one_hot(where: str, species: np.ndarray, n: int) -> np.ndarray:
    """One column per distinct species id (in sorted order), 1 where a node belongs to it."""
    values = species.reshape(species.shape[0], -1) if species.ndim else species.reshape(1, 1)
    if values.shape != (n, 1) or not np.issubdtype(values.dtype, np.integer):
        raise DataError(f"{where}: expected {n} rows of one integer species id, got shape "
                        f"{tuple(species.shape)} of dtype {species.dtype}")
    kinds, index = np.unique(values[:, 0], return_inverse=True)
    out = np.zeros((n, kinds.size))
    out[np.arange(n), index] = 1.0
    return out


def _read_labels(raw: Path, n: int, target: str = "class") -> tuple[np.ndarray, str]:
    """Labels as ``target`` reads them (class ids, -1 = unlabelled; targets or 0/1 labels, a
    column each) from ``node-label.npz`` or ``node-label.csv.gz``."""
    npz = raw / "node-label.npz"
    if npz.exists():
        values, where = _npz(npz, ("node_label",))["node_label"], str(npz)
        if values.ndim == 1:
            values = values[:, None]
    else:
        p = raw / "node-label.csv.gz"
        values, where = _read_table(_need(p), "node labels"), str(p)
    if values.shape[0] != n:
        raise DataError(f"{where}: expected {n} rows (one label per node), got {values.shape[0]}")
    return label_columns(where, values, target), where


DRAW_HINT = "set dataset.split: [train, val, test] fractions to draw one"


def split_folder(root: Path, known: dict = KNOWN, aliases: dict = ALIASES,
                 hint: str = DRAW_HINT) -> Path:
    """The official split's folder: the dataset's own, or the only one under ``split/``
    (``hint`` says what else the user can do)."""
    base = root / "split"
    if not base.is_dir():
        raise DataError(f"{root}: no split/ folder (the official split); {hint}")
    folders = sorted(p.name for p in base.iterdir() if p.is_dir())
    name = ogb_name(root, known, aliases)
    if name is not None and known[name][1] in folders:
        return base / known[name][1]
    if len(folders) == 1:
        return base / folders[0]
    raise DataError(f"{base}: expected one split folder, got {folders or 'none'}; remove the "
                    f"others or {hint}")


def _official_split(root: Path, n: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Masks from the split's ``train/valid/test.csv.gz`` node-id lists (checked, disjoint)."""
    return split_masks(split_folder(root), n)


def split_masks(folder: Path, n: int, what: str = "node ids"
                ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Masks over ``n`` nodes from ``folder``'s ``train/valid/test.csv.gz`` lists of ``what``
    (in range, disjoint), and the file each came from."""
    masks, files = {}, {}
    for key, stem in SPLIT_FILES.items():
        p = folder / f"{stem}.csv.gz"
        if not p.is_file() and (folder / "split_dict.pt").exists():
            raise DataError(f"{folder / 'split_dict.pt'}: a pickled split, which dsgraph does not "
                            f"unpickle; write train/valid/test.csv.gz (one node id per line) "
                            f"or set dataset.split")
        ids = _int_column(p, _read_table(_need(p), what), what)
        out = (ids < 0) | (ids >= n)
        if out.any():
            first = int(np.flatnonzero(out)[0])
            raise DataError(f"{p}: {int(out.sum())} {what} outside [0, {n}), first "
                            f"{int(ids[first])} at line {first + 1}")
        mask = np.zeros(n, dtype=bool)
        mask[ids] = True
        for other, seen in masks.items():
            both = mask & seen
            if both.any():
                raise DataError(f"{p}: {int(both.sum())} node ids also in {files[other]} "
                                f"(first {int(np.flatnonzero(both)[0])}); splits must be disjoint")
        masks[key], files[key] = mask, str(p)
    return masks, files
