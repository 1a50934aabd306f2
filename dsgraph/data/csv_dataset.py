"""DGL CSV dataset folders (``meta.yaml``, a node CSV, an edge CSV) read by DGL's ``CSVDataset``.

One homogeneous graph: one ``node_data`` and one ``edge_data`` entry in ``meta.yaml`` and at most
one graph id. Node columns ``feat`` (a quoted list of numbers per row, as DGL's format writes
vectors) and ``label`` are required (link prediction: ``feat`` only, and no masks or split: it
reads neither), ``train_mask`` / ``val_mask`` / ``test_mask`` optional (all
three, or none and ``dataset.split``); an empty or NaN ``label`` cell marks an unlabelled node
(label -1 here), which no mask holds. ``label`` holds what ``dataset.target`` says: a class id,
or (``regression``, ``multilabel``) a number or a quoted list of numbers per row, one per target
or 0/1 label. Other node columns are ignored.
Nodes are numbered in the order of their sorted ``node_id``, as DGL numbers them; ``node_id``
values must be integers (any, in any order, unique), and the loaded graph carries them
(:func:`user_node_ids`), so that predictions name nodes by them.

Edge columns ``train_mask`` / ``val_mask`` / ``test_mask`` (DGL's convention for edge data,
boolean or 0/1) are link prediction's split (:class:`dsgraph.data.link_split.GivenSplit`): edges
in ``train_mask`` stay in the graph message passing sees; validation and test pairs leave it in
both directions (pairs src < dst, duplicates merged); an edge in no mask leaves it too. All three
or none; an edge in two masks, or an edge ``label`` column (edge labels, negative edges), is
refused when link prediction asks for the split. The edge tasks read edge ``label`` (a
number, or a quoted list of numbers, per edge) and the same masks as their split (or draw it
with ``task.edge_split``). Node tasks ignore edge columns.

DGL caches the parsed graph in ``<folder>/<dataset_name>/`` and reuses it even after the CSV
files change; here its cache goes to ``<cache_dir>/csv-<hash of the files' contents>/`` instead,
written atomically, so the user's folder is only read (it may be read-only), an edited file is
parsed again, and an unwritable cache folder only costs the parse.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import dgl
import numpy as np
import pandas as pd
import yaml
from dgl.data import CSVDataset

from dsgraph.data.arrays import (MASKS, Sources, finish, label_columns, link_placeholder_masks,
                                 short_error, user_path)
from dsgraph.data.edge_targets import EDGE_KEYS, edge_target_arrays, with_edge_targets
from dsgraph.data.link_split import GivenSplit, attach_given_split
from dsgraph.config.limits import short_repr
from dsgraph.errors import DataError, StorageError
from dsgraph.fsutil import atomic_write_with

META = "meta.yaml"
USED_COLUMNS = ("feat", "label") + MASKS
# The graph attribute carrying the user's node ids (load_graph's contract: user_node_ids).
_USER_IDS = "_dsgraph_user_node_ids"


def files_digest(folder: Path, names: Sequence[str]) -> str:
    """A short hash of ``meta.yaml`` and the named files' contents (the cache key)."""
    # "edge-masks": caches written before edge masks were parsed lack them
    # "edge-labels": caches written before edge label values were kept hold ones
    h = hashlib.sha1(f"dgl-csv edge-masks edge-labels {dgl.__version__}".encode())
    for name in (META, *names):
        h.update(name.encode() + b"\0")
        with open(folder / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


class NodeColumns:
    """DGL ``ndata_parser``: the columns dsgraph uses, parsed with errors naming column and line.

    DGL's default parser ``ast.literal_eval``s every text cell, so one unused text column (a
    title, say) or a ``nan`` inside a vector fails the whole file with an opaque message.
    """

    def __init__(self, where: str) -> None:
        self.where = where

    def __call__(self, df: pd.DataFrame) -> dict[str, np.ndarray]:
        """``feat``, ``label`` and the masks of ``df``; other columns are ignored."""
        out = {}
        for key in USED_COLUMNS:
            if key in df.columns:
                col = df[key]
                out[key] = (self._vectors(key, col) if not pd.api.types.is_numeric_dtype(col)
                            else col.to_numpy())
        return out

    def _vectors(self, key: str, col: pd.Series) -> np.ndarray:
        """A text column of comma-separated numbers (optionally in brackets), one row each; an
        empty cell is a row of NaN (an unlabelled node's ``label``, say)."""
        rows: list = []
        width, first = None, 0
        for i, cell in enumerate(col.tolist()):
            if pd.isna(cell):
                rows.append(None)
                continue
            text = str(cell).strip().strip("[]()")
            try:
                row = np.array([float(v) for v in text.split(",")] if text else [],
                               dtype=np.float64)
            except ValueError:
                raise DataError(f"{self.where}: {key}: expected numbers (a quoted, comma-"
                                f"separated list), got {str(cell)[:40]!r} at line {i + 2}"
                                ) from None
            if width is None:
                width, first = row.size, i
            elif row.size != width:
                raise DataError(f"{self.where}: {key}: expected {width} values per row "
                                f"(as on line {first + 2}), got {row.size} at line {i + 2}")
            rows.append(row)
        if width is None:
            return np.full((len(rows), 1), np.nan) if rows else np.zeros((0, 0))
        return np.stack([np.full(width, np.nan) if r is None else r for r in rows])


class EdgeColumns(NodeColumns):
    """DGL ``edata_parser``: the edge masks (checked 0/1) and ``label`` (edge tasks' targets:
    a number, or a quoted list of numbers, per edge; empty for unlabelled)."""

    def __call__(self, df: pd.DataFrame) -> dict[str, np.ndarray]:
        """The masks of ``df`` as uint8; ``label`` as float64 rows (edges x values)."""
        out = {}
        for key in MASKS:
            if key in df.columns:
                col = df[key]
                values = col.to_numpy() if pd.api.types.is_numeric_dtype(col) else None
                bad = (np.ones(len(col), bool) if values is None
                       else ~np.isin(values.astype(np.float64), (0.0, 1.0)))
                if bad.any():
                    first = int(np.flatnonzero(bad)[0])
                    raise DataError(f"{self.where}: {key}: expected True/False or 0/1, got "
                                    f"{str(col.iloc[first])[:40]!r} at line {first + 2}")
                out[key] = values.astype(np.uint8)
        if "label" in df.columns:
            col = df["label"]
            out["label"] = (self._vectors("label", col) if not pd.api.types.is_numeric_dtype(col)
                            else col.to_numpy(np.float64)[:, None])
        return out


class _CachedCSVDataset(CSVDataset):
    """``CSVDataset`` whose processed cache lives in ``cache_dir``, keyed by the files' contents."""

    def __init__(self, data_path: str, cache_path: Path, node_file: str, edge_file: str
                 ) -> None:
        self._cache_path = cache_path  # read by save_path during CSVDataset.__init__
        # Other edge columns (weights, say) are not used: parse none of them.
        super().__init__(data_path, verbose=False, ndata_parser=NodeColumns(node_file),
                         edata_parser=EdgeColumns(edge_file))

    @property
    def save_path(self) -> str:
        """The cache folder (DGL's default is inside the user's dataset folder)."""
        return str(self._cache_path)

    def save(self) -> None:
        """Write the cache atomically; a cache that cannot be written is skipped, not fatal."""
        target = Path(self.save_path) / f"{self.name}.bin"
        with contextlib.suppress(OSError, StorageError):  # fsutil names storage causes
            atomic_write_with(target, lambda tmp: dgl.save_graphs(tmp, self.graphs,
                                                                 labels=self.data))


def load_csv_dataset(path: str | os.PathLike | None, cache_dir: str | os.PathLike = "data",
                     split: Optional[Sequence[float]] = None, seed: int = 0,
                     reverse_edges: bool = False, target: str = "class", link: bool = False,
                     edge_task: Optional[tuple[str, Sequence[float]]] = None) -> dgl.DGLGraph:
    """Read and check a DGL CSV dataset folder; return the DGLGraph (ndata feat, label, masks).

    ``split`` (train, val, test fractions, drawn with ``seed`` among labelled nodes) replaces the
    file's masks and is required when it has none; ``reverse_edges`` appends every edge reversed;
    ``target`` is what ``label`` holds (``dataset.target``). ``link`` (link prediction, which
    reads no node labels or masks): a missing ``label`` or missing masks get placeholders.
    ``edge_task`` (the target kind and ``task.edge_split``): node labels and masks are read as
    for link prediction, and the edge columns give the edge targets
    (:mod:`dsgraph.data.edge_targets`).
    """
    link = link or edge_task is not None
    folder = user_path(path, "DGL CSV dataset folder", f"the folder holding {META}", folder=True)
    node_file, edge_file, names, meta = _check_meta(folder)
    cache = Path(cache_dir) / f"csv-{files_digest(folder, names)}"
    g = parse_one_graph(
        folder, lambda: _CachedCSVDataset(str(folder), cache, str(folder / node_file),
                                          str(folder / edge_file)),
        lambda exc: DataError(f"{folder / edge_file}: an edge names node id {exc.args[0]!r}, "
                              f"which {node_file} does not list"))
    where = Sources(str(folder / node_file), src=str(folder / edge_file),
                    dst=str(folder / edge_file))
    src, dst, nd = _arrays(g, where, target, link)
    if link and split is None:
        nd = link_placeholder_masks(nd)
    out = finish(where, src, dst, nd, split, seed, reverse_edges, unlabelled_ok=True,
                 target=target)
    ids = csv_node_ids(folder, meta, meta["node_data"][0], out.num_nodes())
    attach_user_ids(out, {out.ntypes[0]: ids})
    if edge_task is not None:
        kind, fractions = edge_task
        columns = {k: g.edata[k].numpy() for k in EDGE_KEYS if k in g.edata}
        if "label" in columns and kind == "class":
            columns["label"] = columns["label"].astype(np.float64)
        return with_edge_targets(out, edge_target_arrays(
            str(folder / edge_file), columns, g.num_edges(), kind, fractions, seed))
    given = _edge_split(g, str(folder / edge_file), src, dst)
    return out if given is None else attach_given_split(out, given)


def attach_user_ids(g: dgl.DGLGraph, ids: dict[str, np.ndarray]) -> dgl.DGLGraph:
    """``g`` carrying the user's node ids per node type (``ids[ntype][i]``: node i's id in the
    user's files), read back by :func:`user_node_ids`."""
    setattr(g, _USER_IDS, ids)
    return g


def user_node_ids(g: dgl.DGLGraph) -> Optional[dict[str, np.ndarray]]:
    """The user's node ids per node type (int64, one per node) that ``g``'s loader attached;
    None where ids are positions (0..n-1 in the files' row order), as in every format but DGL
    CSV folders. A graph derived from ``g`` (an edge split, say) does not carry them."""
    return getattr(g, _USER_IDS, None)


def csv_node_ids(folder: Path, meta: dict, item: dict, count: int) -> np.ndarray:
    """The ``node_id`` values of ``item``'s node file (a ``node_data`` entry of ``meta``) in
    DGL's numbering: node i's is the i-th smallest; int64. One-line DataError for ids that are
    not integers; read after DGL's parse, which refused duplicate and missing ids."""
    path = folder / str(item["file_name"])
    column = str(item.get("node_id_field") or "node_id")
    try:  # one column again: DGL's parse (or its cache) does not keep the ids
        values = pd.read_csv(path, sep=meta.get("separator") or ",",
                             usecols=[column])[column].to_numpy()
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise DataError(f"{path}: {column}: unreadable ({short_error(exc)})") from None
    kind, bad = values.dtype.kind, np.zeros(values.shape, dtype=bool)
    if kind == "u":
        bad = values > np.iinfo(np.int64).max
    elif kind == "b":
        bad = np.ones(values.shape, dtype=bool)
    elif kind != "i":  # text ids, which DGL accepts (predictions name nodes by int64 ids), or
        # floats: integral ones (a file writing 3.0) are integer ids
        values = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        cell = pd.read_csv(path, sep=meta.get("separator") or ",", usecols=[column],
                           dtype=str, keep_default_na=False)[column].iloc[first]
        raise DataError(f"{path}: {column}: expected integer node ids, got {cell[:40]!r} at "
                        f"line {first + 2}")
    ids = np.unique(values.astype(np.int64))
    if ids.shape[0] != count:  # DGL refuses duplicates: only a file changed meanwhile
        raise DataError(f"{path}: {column}: expected {count} distinct node ids (as parsed), got "
                        f"{ids.shape[0]}; was the file changed while it was read?")
    return ids


def parse_one_graph(folder: Path, parse: Callable[[], CSVDataset],
                    unknown_id: Callable[[KeyError], DataError]) -> dgl.DGLGraph:
    """The one graph DGL's ``parse()`` reads from ``folder``, its console output swallowed and
    its failures one-line DataErrors (``unknown_id``: an edge naming an unlisted node)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # DGL prints validation details
            ds = parse()
    except DataError:
        raise
    except KeyError as exc:  # DGL maps edge endpoints through a dict of the node ids
        raise unknown_id(exc) from None
    except Exception as exc:  # pandas, pydantic, numpy and DGL errors of malformed content
        raise DataError(f"{folder}: not a readable DGL CSV dataset ({short_error(exc)})") from None
    if len(ds.graphs) != 1:
        raise DataError(f"{folder / META}: expected one graph, got {len(ds.graphs)} (several "
                        f"graph ids); dsgraph trains on one graph")
    return ds.graphs[0]


def _edge_split(g: dgl.DGLGraph, where: str, src: np.ndarray, dst: np.ndarray
                ) -> Optional[GivenSplit]:
    """Link prediction's split from the edge masks (None without them); what makes it unusable
    is recorded, to be raised only if link prediction asks for it."""
    if "label" in g.edata:
        return GivenSplit(where, refuse=f"{where}: edge column 'label' (edge labels or negative "
                                        f"edges): link prediction takes positive edges only; "
                                        f"remove the column and any negative rows")
    present = [k for k in MASKS if k in g.edata]
    if not present:
        return None
    if len(present) < len(MASKS):
        missing = next(k for k in MASKS if k not in present)
        return GivenSplit(where, refuse=f"{where}: missing edge column {missing} (found "
                                        f"{', '.join(present)}); give all three edge masks "
                                        f"or none and task.edge_split")
    masks = {k: g.edata[k].numpy().astype(bool) for k in MASKS}
    count = sum(m.astype(np.int64) for m in masks.values())
    if (count > 1).any():
        first = int(np.flatnonzero(count > 1)[0])
        return GivenSplit(where, refuse=f"{where}: edge at line {first + 2} is in several of "
                                        f"train_mask, val_mask, test_mask; expected one")
    pairs = {}
    for name, key in zip(("train", "val", "test"), MASKS):
        rows = np.sort(np.stack([src[masks[key]], dst[masks[key]]], axis=1), axis=1)
        if rows.shape[0] == 0:
            return GivenSplit(where, refuse=f"{where}: {key}: no edge is marked; link "
                                            f"prediction needs train, validation and test edges")
        pairs[name] = np.unique(rows.astype(np.int64), axis=0)
    return GivenSplit(where, pairs)


def read_meta(folder: Path) -> tuple[Path, dict]:
    """``meta.yaml``'s path and contents, checked: a mapping whose ``node_data`` and
    ``edge_data`` are lists of mappings with ``file_name`` (one-line DataError otherwise)."""
    meta_path = folder / META
    if not meta_path.is_file():
        raise DataError(f"{meta_path}: file not found; a DGL CSV dataset folder holds {META}, "
                        f"node CSVs and edge CSVs")
    try:
        meta: Any = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        raise DataError(f"{meta_path}: not readable YAML ({short_error(exc)})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: expected a mapping (dataset_name, node_data, edge_data), "
                        f"got {type(meta).__name__}")
    for key in ("dataset_name", "node_data", "edge_data"):
        if key not in meta:
            raise DataError(f"{meta_path}: missing key {key!r}; expected dataset_name, node_data "
                            f"and edge_data")
    for key in ("node_data", "edge_data"):
        items = meta[key]
        if not isinstance(items, list) or not all(isinstance(i, dict) and "file_name" in i
                                                  for i in items):
            raise DataError(f"{meta_path}: {key}: expected a list of mappings with file_name, "
                            f"got {short_repr(items)}")
    return meta_path, meta


def _check_meta(folder: Path) -> tuple[str, str, list[str], dict]:
    """Node file, edge file, every file ``meta.yaml`` names and its contents; refuse several
    types early."""
    meta_path, meta = read_meta(folder)
    entries = {}
    for key in ("node_data", "edge_data"):
        items = meta[key]
        if len(items) != 1:
            kind = key.split("_")[0]
            raise DataError(f"{meta_path}: {key}: expected one {kind} type (a homogeneous "
                            f"graph), got {len(items)}; heterogeneous graphs are not supported")
        entries[key] = str(items[0]["file_name"])
    names = listed_files(folder, meta, [entries["node_data"], entries["edge_data"]])
    return entries["node_data"], entries["edge_data"], names, meta


def listed_files(folder: Path, meta: dict, names: list[str]) -> list[str]:
    """``names`` (the node and edge files ``meta.yaml`` lists) plus its ``graph_data`` file, each
    checked to exist in ``folder``; else a one-line DataError naming the file."""
    graph_data = meta.get("graph_data")
    if isinstance(graph_data, dict) and "file_name" in graph_data:
        names = [*names, str(graph_data["file_name"])]
    for name in names:
        if not (folder / name).is_file():
            raise DataError(f"{folder / name}: file not found (named in {META})")
    return names


def _arrays(g: dgl.DGLGraph, where: Sources, target: str = "class", link: bool = False
            ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Edge lists and node columns of the parsed graph; ``label`` as ``target`` reads it (class
    ids, -1 unlabelled; targets or 0/1 labels, a column each); ``link``: a missing ``label``
    is a placeholder (zeros)."""
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise DataError(f"{where.default}: expected a homogeneous graph (one node and one edge "
                        f"type), got {len(g.ntypes)} node types and {len(g.canonical_etypes)} "
                        f"edge types")
    found = sorted(g.ndata.keys())
    for key in ("feat",) if link else ("feat", "label"):
        if key not in g.ndata:
            raise DataError(f"{where.default}: missing node column {key!r} (found "
                            f"{', '.join(found) or 'none'})")
    nd = {k: g.ndata[k].numpy() for k in ("feat", "label", *MASKS) if k in g.ndata}
    if nd["feat"].ndim == 1:  # one number per row: a single feature column
        nd["feat"] = nd["feat"][:, None]
    label = nd.get("label", np.zeros(g.num_nodes()))  # link prediction reads no labels
    nd["label"] = label_columns(where["label"], label[:, None] if label.ndim == 1 else label,
                                target)
    src, dst = (t.numpy() for t in g.edges())
    return src, dst, nd
