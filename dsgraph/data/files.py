"""User graph files: a ``dgl.save_graphs`` binary or an ``.npz`` of edges, features, labels, masks.

Both formats carry node data ``feat`` (nodes x features, floating point), ``label`` (one
non-negative integer per node) and boolean ``train_mask`` / ``val_mask`` / ``test_mask``; an
``.npz`` also carries the edge list as ``src`` / ``dst`` integer arrays. The number of nodes is the
number of feature rows. Every problem found raises :class:`DataError` with one line naming the file
and the key, because a bad input file must be reported, not crash a distributed job later.
"""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import dgl
import numpy as np
import torch

from dsgraph.errors import DataError

NODE_KEYS = ("feat", "label", "train_mask", "val_mask", "test_mask")
NPZ_KEYS = ("src", "dst") + NODE_KEYS
DGL_SUFFIXES = (".dgl", ".bin")


def load_graph_file(path: str | os.PathLike | None):
    """Read and validate a user graph file; return a DGLGraph with ndata feat, label, *_mask."""
    if path is None or str(path) == "":
        raise DataError("dataset.path: expected a graph file (.dgl/.bin from dgl.save_graphs, "
                        "or .npz), got nothing")
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: graph file not found")
    if not p.is_file():
        raise DataError(f"{p}: expected a graph file, got a folder or special file")
    suffix = p.suffix.lower()
    if suffix == ".npz":
        src, dst, nd = _read_npz(p)
    elif suffix in DGL_SUFFIXES:
        src, dst, nd = _read_dgl(p)
    else:
        raise DataError(f"{p}: unknown extension {p.suffix or '(none)'!r}; expected .npz or "
                        f"{'/'.join(DGL_SUFFIXES)} (dgl.save_graphs output)")
    num_nodes = _validate(p, src, dst, nd)
    return _build(src, dst, nd, num_nodes)


def _read_npz(p: Path) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Arrays of an .npz file; pickled (object) arrays are refused rather than executed."""
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = [k for k in NPZ_KEYS if k not in z.files]
            if missing:
                raise DataError(f"{p}: missing key {missing[0]!r}; an .npz graph needs keys "
                                + ", ".join(NPZ_KEYS))
            arrays = {}
            for k in NPZ_KEYS:
                try:
                    arrays[k] = z[k]
                except ValueError:  # object arrays need pickle, which is a code-execution risk
                    raise DataError(f"{p}: {k}: expected a numeric array, got a pickled object "
                                    f"array") from None
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{p}: not a readable .npz file ({_short(exc)})") from None
    src, dst = arrays.pop("src"), arrays.pop("dst")
    return src, dst, arrays


def _read_dgl(p: Path) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Edges and node data of the first graph in a ``dgl.save_graphs`` file."""
    try:
        graphs, _ = dgl.load_graphs(str(p))
    except Exception as exc:  # DGL raises DGLError / RuntimeError variants for corrupt files
        raise DataError(f"{p}: not a readable DGL graph file ({_short(exc)})") from None
    if not graphs:
        raise DataError(f"{p}: the DGL file holds no graph")
    g = graphs[0]
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise DataError(f"{p}: expected a homogeneous graph (one node and one edge type), got "
                        f"{len(g.ntypes)} node types and {len(g.canonical_etypes)} edge types")
    missing = [k for k in NODE_KEYS if k not in g.ndata]
    if missing:
        raise DataError(f"{p}: missing node data {missing[0]!r}; a DGL graph file needs ndata "
                        + ", ".join(NODE_KEYS))
    src, dst = (t.numpy() for t in g.edges())
    nd = {k: g.ndata[k].numpy() for k in NODE_KEYS}
    return src, dst, nd


def _short(exc: BaseException) -> str:
    """The gist of a library error: first line, without DGL's timestamp/source-file prefix."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    text = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", text)  # "[04:49:55] /opt/dgl/src/x.cc:128: "
    if text.startswith("Check failed") and ": " in text:
        text = text.rsplit(": ", 1)[1]  # DGL's reason follows its internal assertion text
    return text[:200]


def _validate(p: Path, src: np.ndarray, dst: np.ndarray, nd: dict[str, np.ndarray]) -> int:
    """Check shapes, dtypes and values; return the number of nodes (rows of ``feat``)."""
    feat = nd["feat"]
    if feat.ndim != 2:
        raise DataError(f"{p}: feat: expected a 2-D array (one row per node), got shape "
                        f"{tuple(feat.shape)}")
    if not np.issubdtype(feat.dtype, np.floating):
        raise DataError(f"{p}: feat: expected floating-point features, got dtype {feat.dtype}")
    n = feat.shape[0]
    if n == 0:
        raise DataError(f"{p}: feat: expected at least one node, got 0 rows")
    bad = ~np.isfinite(feat)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise DataError(f"{p}: feat: {int(bad.sum())} NaN/inf values in {rows.size} rows "
                        f"(first in row {int(rows[0])})")

    label = nd["label"]
    if label.ndim != 1 or label.shape[0] != n:
        raise DataError(f"{p}: label: expected a 1-D array of length {n} (one per feat row), "
                        f"got shape {tuple(label.shape)}")
    if not np.issubdtype(label.dtype, np.integer):
        raise DataError(f"{p}: label: expected integer class ids, got dtype {label.dtype}")
    if label.min() < 0:
        first = int(np.flatnonzero(label < 0)[0])
        raise DataError(f"{p}: label: expected class ids >= 0, got {int(label[first])} "
                        f"at node {first}")

    for key in ("train_mask", "val_mask", "test_mask"):
        mask = nd[key]
        if mask.ndim != 1 or mask.shape[0] != n:
            raise DataError(f"{p}: {key}: expected a 1-D array of length {n} (one per feat row), "
                            f"got shape {tuple(mask.shape)}")
        if mask.dtype != np.bool_:
            # DGL stores bool node data as uint8; 0/1 integers are accepted as the same thing.
            if not np.issubdtype(mask.dtype, np.integer):
                raise DataError(f"{p}: {key}: expected a boolean (or 0/1 integer) mask, got dtype "
                                f"{mask.dtype}")
            if mask.size and (mask.min() < 0 or mask.max() > 1):
                raise DataError(f"{p}: {key}: expected only 0/1 values, got values in "
                                f"[{int(mask.min())}, {int(mask.max())}]")
    if not nd["train_mask"].astype(bool).any():
        raise DataError(f"{p}: train_mask: expected at least one training node, got none")

    for key, ids in (("src", src), ("dst", dst)):
        if ids.ndim != 1:
            raise DataError(f"{p}: {key}: expected a 1-D array of node ids, got shape "
                            f"{tuple(ids.shape)}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise DataError(f"{p}: {key}: expected integer node ids, got dtype {ids.dtype}")
        if ids.size:
            out = (ids < 0) | (ids >= n)
            if out.any():
                first = int(np.flatnonzero(out)[0])
                raise DataError(f"{p}: {key}: {int(out.sum())} node ids outside [0, {n}) "
                                f"(the number of feat rows), first {int(ids[first])} at edge "
                                f"{first}")
    if src.shape[0] != dst.shape[0]:
        raise DataError(f"{p}: dst: expected as many entries as src ({src.shape[0]}), got "
                        f"{dst.shape[0]}")
    return n


def _build(src: np.ndarray, dst: np.ndarray, nd: dict[str, np.ndarray], n: int):
    """The DGLGraph with the validated data in the dtypes the trainers use."""
    g = dgl.graph((torch.from_numpy(src.astype(np.int64)), torch.from_numpy(dst.astype(np.int64))),
                  num_nodes=n)
    g.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(nd["feat"], dtype=np.float32))
    g.ndata["label"] = torch.from_numpy(nd["label"].astype(np.int64))
    for key in ("train_mask", "val_mask", "test_mask"):
        g.ndata[key] = torch.from_numpy(nd[key].astype(bool))
    return g
