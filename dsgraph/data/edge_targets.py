"""Edge targets of the edge tasks (``edge_classification``, ``edge_regression``): read from a
user's edge columns or planted in a generated graph, checked, split, and carried on the graph's
edges as edata ``label`` (int64 class ids, ``-1`` unlabelled; or float32 edges x targets, a NaN
row unlabelled) and ``train_mask`` / ``val_mask`` / ``test_mask``.

The masks come with the data (all three or none) or are drawn over the labelled edges with
``task.edge_split``. Reverse edges a loader appends carry messages, not targets: they copy the
label and sit in no mask. Every problem is one :class:`DataError` line naming the file and key.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import dgl
import numpy as np
import torch

from dsgraph.data.arrays import UNLABELLED
from dsgraph.data.split import MASKS, random_split
from dsgraph.errors import DataError

EDGE_KEYS = ("label",) + MASKS
# The graph attribute holding how many edges are the user's (:func:`user_edges`).
_USER_EDGES = "_dsgraph_user_edges"
WORDS = {"class": "class ids", "regression": "numbers"}
# Planted targets: a target's own noise (edge_regression), which no model can predict.
NOISE = 0.1


def edge_target_arrays(where: str, columns: Mapping[str, Optional[np.ndarray]], num_edges: int,
                       kind: str, fractions: Sequence[float], seed: int,
                       prefix: str = "") -> dict[str, np.ndarray]:
    """Checked edge ``label`` (``kind``: ``class`` or ``regression``) and masks from
    ``columns`` (a key absent or None: not given); without masks, ``fractions`` (train, val,
    test) of the labelled edges drawn with ``seed``. ``prefix`` is how the source names the
    keys (``edge_`` in an .npz)."""
    label = columns.get("label")
    if label is None:
        raise DataError(f"{where}: no {prefix}label: an edge task reads one {WORDS[kind][:-1]} "
                        f"per edge from the edges' {prefix}label")
    label = _checked_label(where, f"{prefix}label", np.asarray(label), num_edges, kind)
    labelled = label != UNLABELLED if label.ndim == 1 else ~np.isnan(label).any(axis=1)
    present = [k for k in MASKS if columns.get(k) is not None]
    if not present:
        masks = random_split(num_edges, fractions, seed, eligible=labelled)
    elif len(present) < len(MASKS):
        missing = next(k for k in MASKS if k not in present)
        raise DataError(f"{where}: missing edge {prefix}{missing} (found "
                        f"{', '.join(prefix + k for k in present)}); give all three edge masks "
                        f"or none (task.edge_split draws them)")
    else:
        masks = {k: _checked_mask(where, prefix + k, np.asarray(columns[k]), num_edges)
                 for k in MASKS}
        count = sum(m.astype(np.int64) for m in masks.values())
        for bad, what in ((count > 1, "in several masks"), ((count > 0) & ~labelled,
                                                             "in a mask without a label")):
            if bad.any():
                raise DataError(f"{where}: edge {int(np.flatnonzero(bad)[0])} is {what}; "
                                f"expected each labelled edge in at most one of "
                                f"{', '.join(prefix + k for k in MASKS)}")
    if not masks["train_mask"].any():
        raise DataError(f"{where}: {prefix}train_mask: expected at least one labelled training "
                        f"edge, got none ({int(labelled.sum())} labelled edges)")
    return {"label": label, **masks}


def _checked_label(where: str, key: str, label: np.ndarray, num_edges: int,
                   kind: str) -> np.ndarray:
    """Class ids as int64 (NaN or -1: unlabelled) or float32 targets (edges x targets)."""
    if label.ndim not in (1, 2) or label.shape[0] != num_edges or label.size == 0:
        raise DataError(f"{where}: {key}: expected {num_edges} rows (one per edge) of "
                        f"{WORDS[kind]}, got shape {tuple(label.shape)}")
    if not (np.issubdtype(label.dtype, np.integer) or np.issubdtype(label.dtype, np.floating)
            or label.dtype == np.bool_):
        raise DataError(f"{where}: {key}: expected {WORDS[kind]}, got dtype {label.dtype}")
    v = label.astype(np.float64)
    if kind == "regression":
        v = v if v.ndim == 2 else v[:, None]
        bad = np.isinf(v)
        if bad.any():
            raise DataError(f"{where}: {key}: expected finite numbers (NaN for unlabelled), got "
                            f"{float(v[bad][0])!r} at edge {int(np.nonzero(bad)[0][0])}")
        return v.astype(np.float32)
    if v.ndim == 2:
        if v.shape[1] != 1:
            raise DataError(f"{where}: {key}: expected one class id per edge, got "
                            f"{v.shape[1]} columns (several targets: task edge_regression)")
        v = v[:, 0]
    known = ~np.isnan(v)
    bad = known & ((v < UNLABELLED) | (v != np.floor(v)))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataError(f"{where}: {key}: expected class ids >= 0 (-1 or NaN for unlabelled), "
                        f"got {float(v[first])!r} at edge {first}")
    return np.where(known, v, UNLABELLED).astype(np.int64)


def _checked_mask(where: str, key: str, mask: np.ndarray, num_edges: int) -> np.ndarray:
    """A 0/1 (or boolean) mask with one entry per edge."""
    if mask.shape != (num_edges,):
        raise DataError(f"{where}: {key}: expected {num_edges} values (one per edge), got shape "
                        f"{tuple(mask.shape)}")
    v = mask.astype(np.float64) if mask.dtype != np.bool_ else mask
    if mask.dtype != np.bool_ and not np.isin(v, (0.0, 1.0)).all():
        first = int(np.flatnonzero(~np.isin(v, (0.0, 1.0)))[0])
        raise DataError(f"{where}: {key}: expected True/False or 0/1, got {mask[first]!r} at "
                        f"edge {first}")
    return mask.astype(bool)


def user_edges(g: dgl.DGLGraph) -> int:
    """How many of ``g``'s first edges are the user's (the rest: reverse copies)."""
    return int(getattr(g, _USER_EDGES, g.num_edges()))


def with_edge_targets(g: dgl.DGLGraph, arrays: Mapping[str, np.ndarray]) -> dgl.DGLGraph:
    """``g`` with the edge targets of its first ``len(arrays['label'])`` edges; edges after
    them (reverse edges a loader appended, in the same order) copy the label, in no mask."""
    label = arrays["label"]
    given, total = len(label), g.num_edges()
    if total % given:
        raise ValueError(f"{total} edges are not copies of the {given} labelled ones")
    copies = total // given
    g.edata["label"] = torch.from_numpy(np.concatenate([label] * copies))
    for key in MASKS:
        pad = np.zeros((copies - 1) * given, dtype=bool)
        g.edata[key] = torch.from_numpy(np.concatenate([arrays[key].astype(bool), pad]))
    setattr(g, _USER_EDGES, given)
    return g


def planted_targets(community: np.ndarray, num_communities: int, src: np.ndarray,
                    dst: np.ndarray, kind: str, seed: int) -> np.ndarray:
    """Targets of a generated graph's edges from its endpoints' communities, which features
    show faintly and message passing recovers: the class ``(c_src + 2 c_dst) mod C``, or
    ``sin(2 pi c_src / C) + cos(2 pi c_dst / C)`` plus noise."""
    cs, cd = community[src].astype(np.int64), community[dst].astype(np.int64)
    if kind == "class":
        return (cs + 2 * cd) % num_communities
    rng = np.random.default_rng(seed)
    value = (np.sin(2 * np.pi * cs / num_communities) + np.cos(2 * np.pi * cd / num_communities)
             + NOISE * rng.standard_normal(len(src)))
    return value[:, None].astype(np.float32)
