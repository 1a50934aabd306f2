"""Node-task arrays read from a user's files: checks, masks and the DGLGraph built.

Every reader (``file``, ``csv``, ``ogb``) turns its input into numpy arrays: ``src`` / ``dst``
edge lists, ``feat`` (nodes x features), ``label`` and optional boolean masks. What ``label``
holds is ``dataset.target``: ``class``, one class id per node (``-1`` = unlabelled where the
format allows it); ``regression``, float targets (nodes x targets); ``multilabel``, 0/1 per
label (nodes x labels), both float32 with a NaN row for an unlabelled node. The checks here raise
:class:`DataError` with one line naming the file an array came from (``sources[key]``) and the
key, so a bad input is reported before it can crash a distributed job later.
"""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import dgl
import numpy as np
import torch

from dsgraph.data.split import MASKS, random_split
from dsgraph.errors import DataError

UNLABELLED = -1  # label of a node without a class (NaN in OGB / CSV label files)
TARGET_WORDS = {"regression": "float targets", "multilabel": "0/1 labels"}


class Sources(dict):
    """Which file each array came from, for error messages; a missing key names ``default``."""

    def __init__(self, default: str, **named: str) -> None:
        super().__init__(named)
        self.default = default

    def __missing__(self, key: str) -> str:
        return self.default


def user_path(path: str | os.PathLike | None, kind: str, holds: str, folder: bool) -> Path:
    """``dataset.path`` as an existing file (``folder`` False) or folder; otherwise a one-line
    DataError naming it, ``kind`` (what it should be: "graph file") and ``holds``."""
    if path is None or str(path) == "":
        raise DataError(f"dataset.path: expected the {kind} ({holds}), got nothing")
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: {kind} not found (expected {holds})")
    if p.is_dir() != folder or not (folder or p.is_file()):
        got = "a folder" if p.is_dir() else "a file" if folder else "a special file"
        raise DataError(f"{p}: expected the {kind} ({holds}), got {got}")
    return p


def read_npz(p: Path, select: Callable[[list[str]], Sequence[str]]
             ) -> tuple[list[str], dict[str, np.ndarray]]:
    """The names an ``.npz`` holds and the arrays ``select(names)`` picks (it may raise a
    DataError, say for a missing key); pickled (object) arrays are refused, never loaded, and an
    unreadable file is one line."""
    try:
        with np.load(p, allow_pickle=False) as z:
            names = list(z.files)
            out = {}
            for k in select(names):
                try:
                    out[k] = z[k]
                except ValueError:  # object arrays need pickle, which can execute code
                    raise DataError(f"{p}: {k}: expected a numeric array, got a pickled object "
                                    f"array") from None
            return names, out
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{p}: not a readable .npz file ({short_error(exc)})") from None


def short_error(exc: BaseException) -> str:
    """The gist of a library error: first line, without DGL's timestamp/source-file prefix."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    text = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", text)  # "[04:49:55] /opt/dgl/src/x.cc:128: "
    if text.startswith("Check failed") and ": " in text:
        text = text.rsplit(": ", 1)[1]  # DGL's reason follows its internal assertion text
    return text[:200]


def check_feat(where: Mapping[str, str], feat: np.ndarray) -> int:
    """Check the feature matrix (2-D, floating point, finite); return its rows (= nodes)."""
    if feat.ndim != 2:
        raise DataError(f"{where['feat']}: feat: expected a 2-D array (one row per node), got "
                        f"shape {tuple(feat.shape)}")
    if not np.issubdtype(feat.dtype, np.floating):
        raise DataError(f"{where['feat']}: feat: expected floating-point features, got dtype "
                        f"{feat.dtype}")
    n = feat.shape[0]
    if n == 0:
        raise DataError(f"{where['feat']}: feat: expected at least one node, got 0 rows")
    bad = ~np.isfinite(feat)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise DataError(f"{where['feat']}: feat: {int(bad.sum())} NaN/inf values in {rows.size} "
                        f"rows (first in row {int(rows[0])})")
    return n


def check_label(where: Mapping[str, str], label: np.ndarray, n: int,
                unlabelled_ok: bool = False, target: str = "class") -> np.ndarray:
    """The labels as ``target`` stores them, checked: one integer class id per node (``-1``,
    unlabelled, allowed if ``unlabelled_ok``), or float targets / 0/1 labels, one row per node
    (a NaN row unlabelled, if ``unlabelled_ok``)."""
    if target != "class":
        if label.ndim not in (1, 2) or label.shape[0] != n:
            raise DataError(f"{where['label']}: label: expected {n} rows (one per feat row) of "
                            f"{TARGET_WORDS[target]}, got shape {tuple(label.shape)}")
        values = label_columns(where["label"], label if label.ndim == 2 else label[:, None],
                               target)
        if not unlabelled_ok and np.isnan(values).any():
            first = int(np.flatnonzero(np.isnan(values).any(1))[0])
            raise DataError(f"{where['label']}: label: expected a value in every row, got NaN "
                            f"at node {first}")
        return values
    if label.ndim != 1 or label.shape[0] != n:
        raise DataError(f"{where['label']}: label: expected a 1-D array of length {n} (one per "
                        f"feat row), got shape {tuple(label.shape)}")
    if not np.issubdtype(label.dtype, np.integer):
        raise DataError(f"{where['label']}: label: expected integer class ids, got dtype "
                        f"{label.dtype}")
    low = UNLABELLED if unlabelled_ok else 0
    if label.size and label.min() < low:
        first = int(np.flatnonzero(label < low)[0])
        raise DataError(f"{where['label']}: label: expected class ids >= 0, got "
                        f"{int(label[first])} at node {first}")
    return label


def check_id_range(where: str, key: str, ids: np.ndarray, n: int, bound: str) -> None:
    """Edge endpoints ``ids`` within ``[0, n)`` (``bound`` says where ``n`` comes from); else a
    one-line DataError naming how many are out and the first."""
    out = (ids < 0) | (ids >= n)
    if out.any():
        first = int(np.flatnonzero(out)[0])
        raise DataError(f"{where}: {key}: {int(out.sum())} node ids outside [0, {n}) ({bound}), "
                        f"first {int(ids[first])} at edge {first}")


def check_edges(where: Mapping[str, str], src: np.ndarray, dst: np.ndarray, n: int) -> None:
    """Check the edge lists: 1-D integer node ids in ``[0, n)``, as many sources as targets."""
    for key, ids in (("src", src), ("dst", dst)):
        if ids.ndim != 1:
            raise DataError(f"{where[key]}: {key}: expected a 1-D array of node ids, got shape "
                            f"{tuple(ids.shape)}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise DataError(f"{where[key]}: {key}: expected integer node ids, got dtype "
                            f"{ids.dtype}")
        check_id_range(where[key], key, ids, n, "the number of feat rows")
    if src.shape[0] != dst.shape[0]:
        raise DataError(f"{where['dst']}: dst: expected as many entries as src ({src.shape[0]}), "
                        f"got {dst.shape[0]}")


def check_masks(where: Mapping[str, str], masks: Mapping[str, np.ndarray], n: int) -> None:
    """Check the three masks: 1-D, ``n`` long, boolean or 0/1; at least one training node."""
    for key in MASKS:
        mask = masks[key]
        if mask.ndim != 1 or mask.shape[0] != n:
            raise DataError(f"{where[key]}: {key}: expected a 1-D array of length {n} (one per "
                            f"feat row), got shape {tuple(mask.shape)}")
        if mask.dtype != np.bool_:
            # DGL stores bool node data as uint8; 0/1 integers are accepted as the same thing.
            if not np.issubdtype(mask.dtype, np.integer):
                raise DataError(f"{where[key]}: {key}: expected a boolean (or 0/1 integer) mask, "
                                f"got dtype {mask.dtype}")
            if mask.size and (mask.min() < 0 or mask.max() > 1):
                raise DataError(f"{where[key]}: {key}: expected only 0/1 values, got values in "
                                f"[{int(mask.min())}, {int(mask.max())}]")
    if not masks["train_mask"].astype(bool).any():
        raise DataError(f"{where['train_mask']}: train_mask: expected at least one training "
                        f"node, got none")


def resolve_masks(where: Mapping[str, str], nd: dict[str, np.ndarray], n: int,
                  split: Optional[Sequence[float]], seed: int) -> dict[str, np.ndarray]:
    """The three masks: drawn from ``split`` when it is set (it replaces a file's masks), else the
    file's own; labelled nodes only either way. A file without masks needs ``split``."""
    labelled = labelled_rows(nd["label"])
    if split is not None:
        masks = random_split(n, split, seed, eligible=labelled)
    else:
        present = [k for k in MASKS if k in nd]
        if not present:
            raise DataError(f"{where['masks']}: no train_mask/val_mask/test_mask; set "
                            f"dataset.split: [train, val, test] fractions (e.g. [0.8, 0.1, 0.1]) "
                            f"to draw them")
        if len(present) < len(MASKS):
            missing = next(k for k in MASKS if k not in nd)
            raise DataError(f"{where[missing]}: missing {missing} (found "
                            f"{', '.join(present)}); give all three masks or none and "
                            f"dataset.split")
        masks = {k: nd[k] for k in MASKS}
        check_masks(where, masks, n)
        masks = {k: m.astype(bool) & labelled for k, m in masks.items()}
    if not masks["train_mask"].any():
        what = (f"dataset.split {list(split)} of {int(labelled.sum())} labelled nodes"
                if split is not None else "the file's train_mask")
        raise DataError(f"{where['train_mask']}: train_mask: expected at least one labelled "
                        f"training node, got none from {what}")
    return masks


def link_placeholder_masks(nd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``nd`` with the node masks of a graph for link prediction, which reads none: the file's
    when it gives any, else every node in ``train_mask`` (as OGB link folders get them)."""
    if any(k in nd for k in MASKS):
        return nd
    n = len(nd["feat"])
    return {**nd, "train_mask": np.ones(n, bool), "val_mask": np.zeros(n, bool),
            "test_mask": np.zeros(n, bool)}


def with_reverse_edges(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edge list followed by every edge reversed (as OGB's ``add_inverse_edge`` does)."""
    return np.concatenate([src, dst]), np.concatenate([dst, src])


def build_graph(src: np.ndarray, dst: np.ndarray, feat: np.ndarray, label: np.ndarray,
                masks: Mapping[str, np.ndarray], n: int) -> dgl.DGLGraph:
    """The DGLGraph with the checked data in the dtypes the trainers use."""
    g = dgl.graph((torch.from_numpy(src.astype(np.int64)), torch.from_numpy(dst.astype(np.int64))),
                  num_nodes=n)
    g.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(feat, dtype=np.float32))
    # class ids as int64; float targets and 0/1 labels as float32 (the trainers' dtypes)
    g.ndata["label"] = torch.from_numpy(label.astype(np.float32 if label.ndim == 2 else np.int64))
    for key in MASKS:
        g.ndata[key] = torch.from_numpy(np.asarray(masks[key]).astype(bool))
    return g


def finish(where: Mapping[str, str], src: np.ndarray, dst: np.ndarray, nd: dict[str, np.ndarray],
           split: Optional[Sequence[float]], seed: int, reverse: bool,
           unlabelled_ok: bool = False, target: str = "class") -> dgl.DGLGraph:
    """Check every array (``label`` as ``target`` reads it), settle the masks, add reverse edges
    if asked; return the DGLGraph."""
    n = check_feat(where, nd["feat"])
    nd = {**nd, "label": check_label(where, nd["label"], n, unlabelled_ok, target)}
    check_edges(where, src, dst, n)
    masks = resolve_masks(where, nd, n, split, seed)
    if reverse:
        src, dst = with_reverse_edges(src, dst)
    return build_graph(src, dst, nd["feat"], nd["label"], masks, n)


def labelled_rows(label: np.ndarray) -> np.ndarray:
    """Which nodes have a label: a class id other than ``-1``, or a row without NaN."""
    if label.ndim == 2:
        return ~np.isnan(label).any(axis=1)
    return label != UNLABELLED


def label_columns(where: str, values: np.ndarray, target: str) -> np.ndarray:
    """A label table (nodes x columns, from a text or array file) as ``target`` reads it: class
    ids (:func:`float_labels`), or float32 targets / 0/1 labels, NaN for a missing value (its
    node then counts as unlabelled)."""
    if target == "class":
        return float_labels(where, values)
    if values.ndim != 2 or values.shape[1] == 0:
        raise DataError(f"{where}: label: expected one column per {TARGET_WORDS[target][:-1]}, "
                        f"got shape {tuple(values.shape)}")
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)
            or values.dtype == np.bool_):
        raise DataError(f"{where}: label: expected numbers, got dtype {values.dtype}")
    v = values.astype(np.float64)
    bad = np.isinf(v) if target == "regression" else ~(np.isnan(v) | (v == 0) | (v == 1))
    if bad.any():
        row, col = (int(i[0]) for i in np.nonzero(bad))
        wanted = "finite numbers" if target == "regression" else "0 or 1"
        raise DataError(f"{where}: label: expected {wanted} (NaN for unlabelled), got "
                        f"{float(v[row, col])!r} at node {row}, column {col}")
    return v.astype(np.float32)


def float_labels(where: str, values: np.ndarray) -> np.ndarray:
    """Class ids from a text file's label column: NaN = unlabelled (``-1``), else integers >= 0."""
    if values.ndim != 2 or values.shape[1] != 1:
        cols = values.shape[1] if values.ndim == 2 else "no"
        raise DataError(f"{where}: label: expected one label column (N x 1), got {cols} columns "
                        f"(several columns: set dataset.target to multilabel or regression)")
    v = values[:, 0]
    if np.issubdtype(v.dtype, np.integer):
        bad = v < 0
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise DataError(f"{where}: label: expected class ids >= 0 (NaN for unlabelled), got "
                            f"{int(v[first])} at node {first}")
        return v.astype(np.int64)
    if not np.issubdtype(v.dtype, np.floating):
        raise DataError(f"{where}: label: expected numeric class ids, got dtype {v.dtype}")
    known = ~np.isnan(v)
    bad = known & ((v < 0) | (v != np.floor(v)) | np.isinf(v))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataError(f"{where}: label: expected class ids (integers >= 0, NaN for "
                        f"unlabelled), got {float(v[first])!r} at node {first}")
    out = np.full(v.shape[0], UNLABELLED, dtype=np.int64)
    out[known] = v[known].astype(np.int64)
    return out
