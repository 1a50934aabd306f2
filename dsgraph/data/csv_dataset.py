"""DGL CSV dataset folders (``meta.yaml``, a node CSV, an edge CSV) read by DGL's ``CSVDataset``.

One homogeneous graph: one ``node_data`` and one ``edge_data`` entry in ``meta.yaml`` and at most
one graph id. Node columns ``feat`` (a quoted list of numbers per row, as DGL's format writes
vectors) and ``label`` are required, ``train_mask`` / ``val_mask`` / ``test_mask`` optional (all
three, or none and ``dataset.split``); an empty or NaN ``label`` cell marks an unlabelled node
(label -1 here), which no mask holds. ``label`` holds what ``dataset.target`` says: a class id,
or (``regression``, ``multilabel``) a number or a quoted list of numbers per row, one per target
or 0/1 label. Other node columns and all edge columns are ignored.
Nodes are numbered in the order of their sorted ``node_id``, as DGL numbers them.

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
from typing import Any, Optional, Sequence

import dgl
import numpy as np
import pandas as pd
import yaml
from dgl.data import CSVDataset

from dsgraph.data.arrays import MASKS, Sources, finish, label_columns, short_error, user_path
from dsgraph.errors import DataError, StorageError
from dsgraph.fsutil import atomic_write_with

META = "meta.yaml"
USED_COLUMNS = ("feat", "label") + MASKS


def files_digest(folder: Path, names: Sequence[str]) -> str:
    """A short hash of ``meta.yaml`` and the named files' contents (the cache key)."""
    h = hashlib.sha1(f"dgl-csv {dgl.__version__}".encode())
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


class _CachedCSVDataset(CSVDataset):
    """``CSVDataset`` whose processed cache lives in ``cache_dir``, keyed by the files' contents."""

    def __init__(self, data_path: str, cache_path: Path, node_file: str) -> None:
        self._cache_path = cache_path  # read by save_path during CSVDataset.__init__
        # Edge columns (weights, say) are not used: parse none of them.
        super().__init__(data_path, verbose=False, ndata_parser=NodeColumns(node_file),
                         edata_parser=lambda df: {})

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
                     reverse_edges: bool = False, target: str = "class") -> dgl.DGLGraph:
    """Read and check a DGL CSV dataset folder; return the DGLGraph (ndata feat, label, masks).

    ``split`` (train, val, test fractions, drawn with ``seed`` among labelled nodes) replaces the
    file's masks and is required when it has none; ``reverse_edges`` appends every edge reversed;
    ``target`` is what ``label`` holds (``dataset.target``).
    """
    folder = user_path(path, "DGL CSV dataset folder", f"the folder holding {META}", folder=True)
    node_file, edge_file, names = _check_meta(folder)
    cache = Path(cache_dir) / f"csv-{files_digest(folder, names)}"
    quiet = io.StringIO()  # DGL prints validation details and warnings to stdout
    try:
        with contextlib.redirect_stdout(quiet):
            ds = _CachedCSVDataset(str(folder), cache, str(folder / node_file))
    except DataError:
        raise
    except KeyError as exc:  # DGL maps edge endpoints through a dict of the node ids
        raise DataError(f"{folder / edge_file}: an edge names node id {exc.args[0]!r}, which "
                        f"{node_file} does not list") from None
    except Exception as exc:  # pandas, pydantic, numpy and DGL errors of malformed content
        raise DataError(f"{folder}: not a readable DGL CSV dataset ({short_error(exc)})") from None
    if len(ds.graphs) != 1:
        raise DataError(f"{folder / META}: expected one graph, got {len(ds.graphs)} (several "
                        f"graph ids); dsgraph trains on one graph")
    g = ds.graphs[0]
    where = Sources(str(folder / node_file), src=str(folder / edge_file),
                    dst=str(folder / edge_file))
    src, dst, nd = _arrays(g, where, target)
    return finish(where, src, dst, nd, split, seed, reverse_edges, unlabelled_ok=True,
                  target=target)


def _check_meta(folder: Path) -> tuple[str, str, list[str]]:
    """Node file, edge file and every file ``meta.yaml`` names; refuse several types early."""
    meta_path = folder / META
    if not meta_path.is_file():
        raise DataError(f"{meta_path}: file not found; a DGL CSV dataset folder holds {META}, a "
                        f"node CSV and an edge CSV")
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
    entries = {}
    for key in ("node_data", "edge_data"):
        items = meta[key]
        if not isinstance(items, list) or not all(isinstance(i, dict) and "file_name" in i
                                                  for i in items):
            raise DataError(f"{meta_path}: {key}: expected a list of mappings with file_name, "
                            f"got {items!r}")
        if len(items) != 1:
            kind = key.split("_")[0]
            raise DataError(f"{meta_path}: {key}: expected one {kind} type (a homogeneous "
                            f"graph), got {len(items)}; heterogeneous graphs are not supported")
        entries[key] = str(items[0]["file_name"])
    names = [entries["node_data"], entries["edge_data"]]
    graph_data = meta.get("graph_data")
    if isinstance(graph_data, dict) and "file_name" in graph_data:
        names.append(str(graph_data["file_name"]))
    for name in names:
        if not (folder / name).is_file():
            raise DataError(f"{folder / name}: file not found (named in {META})")
    return entries["node_data"], entries["edge_data"], names


def _arrays(g: dgl.DGLGraph, where: Sources, target: str = "class"
            ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Edge lists and node columns of the parsed graph; ``label`` as ``target`` reads it (class
    ids, -1 unlabelled; targets or 0/1 labels, a column each)."""
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise DataError(f"{where.default}: expected a homogeneous graph (one node and one edge "
                        f"type), got {len(g.ntypes)} node types and {len(g.canonical_etypes)} "
                        f"edge types")
    found = sorted(g.ndata.keys())
    for key in ("feat", "label"):
        if key not in g.ndata:
            raise DataError(f"{where.default}: missing node column {key!r} (found "
                            f"{', '.join(found) or 'none'})")
    nd = {k: g.ndata[k].numpy() for k in ("feat", "label", *MASKS) if k in g.ndata}
    if nd["feat"].ndim == 1:  # one number per row: a single feature column
        nd["feat"] = nd["feat"][:, None]
    label = nd["label"]
    nd["label"] = label_columns(where["label"], label[:, None] if label.ndim == 1 else label,
                                target)
    src, dst = (t.numpy() for t in g.edges())
    return src, dst, nd
