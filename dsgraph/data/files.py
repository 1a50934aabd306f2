"""User graph files: a ``dgl.save_graphs`` binary or an ``.npz`` of edges, features, labels, masks.

Both formats carry node data ``feat`` (nodes x features, floating point), ``label`` (one
non-negative integer per node; with ``dataset.target`` ``regression`` / ``multilabel`` numbers,
one row per node and a column per target or 0/1 label) and boolean ``train_mask`` /
``val_mask`` / ``test_mask``; an ``.npz`` also carries the edge list as ``src`` / ``dst``
integer arrays. The number of nodes is the number of feature rows. A file without any of the
masks needs ``dataset.split`` (which, when set, replaces a file's masks). Every problem found
raises :class:`DataError` with one line naming the file and the key, because a bad input file
must be reported, not crash a distributed job later.

The edge tasks read edge targets instead of node ones (node ``label`` and masks optional): an
``.npz``'s ``edge_label`` and optional ``edge_train_mask`` / ``edge_val_mask`` /
``edge_test_mask`` (one entry per ``src`` / ``dst`` pair), a DGL file's edata ``label`` and
masks (:mod:`dsgraph.data.edge_targets`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import dgl
import numpy as np

from dsgraph.data.arrays import (MASKS, Sources, finish, link_placeholder_masks,
                                 read_npz, short_error, user_path)
from dsgraph.data.edge_targets import EDGE_KEYS, edge_target_arrays, with_edge_targets
from dsgraph.errors import DataError

NODE_KEYS = ("feat", "label") + MASKS
NPZ_KEYS = ("src", "dst") + NODE_KEYS
DGL_SUFFIXES = (".dgl", ".bin")
NPZ_EDGE_PREFIX = "edge_"  # an .npz's edge targets: edge_label, edge_train_mask, ...
Arrays = tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]  # src, dst, node data


def load_graph_file(path: str | os.PathLike | None, split: Optional[Sequence[float]] = None,
                    seed: int = 0, reverse_edges: bool = False,
                    target: str = "class",
                    edge_task: Optional[tuple[str, Sequence[float]]] = None) -> dgl.DGLGraph:
    """Read and validate a user graph file; return a DGLGraph with ndata feat, label, *_mask.

    ``split`` (train, val, test fractions, drawn with ``seed``) replaces the file's masks and is
    required when the file has none; ``reverse_edges`` appends every edge reversed; ``target``
    is what ``label`` holds (``dataset.target``). ``edge_task`` (the target kind and
    ``task.edge_split``): the edge targets are read too, node labels and masks optional.
    """
    p = user_path(path, "graph file", "a .dgl/.bin file from dgl.save_graphs, or an .npz", folder=False)
    suffix = p.suffix.lower()
    optional = split is not None or edge_task is not None
    edges: dict[str, np.ndarray] = {}
    if suffix == ".npz":
        src, dst, nd = _read_npz(p, optional, edges if edge_task else None)
    elif suffix in DGL_SUFFIXES:
        src, dst, nd = _read_dgl(p, optional, edges if edge_task else None)
    else:
        raise DataError(f"{p}: unknown extension {p.suffix or '(none)'!r}; expected .npz or "
                        f"{'/'.join(DGL_SUFFIXES)} (dgl.save_graphs output)")
    if edge_task is None:
        return finish(Sources(str(p)), src, dst, nd, split, seed, reverse_edges, target=target)
    kind, fractions = edge_task
    targets = edge_target_arrays(str(p), edges, len(src), kind, fractions, seed,
                                 prefix=NPZ_EDGE_PREFIX if suffix == ".npz" else "")
    # node labels and masks are not read: placeholders, as link prediction's
    nd = link_placeholder_masks({**nd, "label": np.zeros(len(nd["feat"]), dtype=np.int64)})
    g = finish(Sources(str(p)), src, dst, nd, None, seed, reverse_edges, unlabelled_ok=True)
    return with_edge_targets(g, targets)


def _required(keys: tuple[str, ...], present: list[str], masks_optional: bool) -> list[str]:
    """The keys a file must hold: masks may all be absent (a split draws them) but not some."""
    if masks_optional or not any(k in present for k in MASKS):
        return [k for k in keys if k not in MASKS]
    return list(keys)


def _read_npz(p: Path, masks_optional: bool, edges: Optional[dict] = None) -> Arrays:
    """Arrays of an .npz file; pickled (object) arrays are refused rather than executed.
    ``edges`` (edge tasks) receives the edge targets; node labels are optional then."""
    keys = NPZ_KEYS if edges is None else ("src", "dst", "feat")
    edge_keys = [NPZ_EDGE_PREFIX + k for k in EDGE_KEYS] if edges is not None else []

    def select(names: list[str]) -> list[str]:
        missing = [k for k in _required(keys, names, masks_optional) if k not in names]
        if missing:
            raise DataError(f"{p}: missing key {missing[0]!r}; an .npz graph needs keys "
                            + ", ".join(keys))
        return [k for k in keys if k in names and not (masks_optional and k in MASKS)] \
            + [k for k in edge_keys if k in names]

    _, arrays = read_npz(p, select)
    for k in edge_keys:
        if k in arrays:
            edges[k[len(NPZ_EDGE_PREFIX):]] = arrays.pop(k)
    src, dst = arrays.pop("src"), arrays.pop("dst")
    return src, dst, arrays


def _read_dgl(p: Path, masks_optional: bool, edges: Optional[dict] = None) -> Arrays:
    """Edges and node data of the only graph in a ``dgl.save_graphs`` file; ``edges`` (edge
    tasks) receives its edge targets (edata), node labels optional then."""
    try:
        graphs, _ = dgl.load_graphs(str(p))
    except Exception as exc:  # DGL raises DGLError / RuntimeError variants for corrupt files
        raise DataError(f"{p}: not a readable DGL graph file ({short_error(exc)})") from None
    if len(graphs) != 1:
        raise DataError(f"{p}: expected one graph in the DGL file, got {len(graphs)}")
    g = graphs[0]
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise DataError(f"{p}: expected a homogeneous graph (one node and one edge type), got "
                        f"{len(g.ntypes)} node types and {len(g.canonical_etypes)} edge types")
    keys = NODE_KEYS if edges is None else ("feat",)
    required = _required(keys, list(g.ndata.keys()), masks_optional)
    missing = [k for k in required if k not in g.ndata]
    if missing:
        raise DataError(f"{p}: missing node data {missing[0]!r}; a DGL graph file needs ndata "
                        + ", ".join(keys))
    if edges is not None:
        edges.update({k: g.edata[k].numpy() for k in EDGE_KEYS if k in g.edata})
    src, dst = (t.numpy() for t in g.edges())
    keep = [k for k in keys if k in g.ndata and not (masks_optional and k in MASKS)]
    return src, dst, {k: g.ndata[k].numpy() for k in keep}
