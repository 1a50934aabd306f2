"""OGB link-property-prediction folders (``ogbl-collab``, ``-ppa``, ``-ddi``, ``-citation2``) read
from their raw files and official edge split, for ``task.name: link_prediction``.

``dataset.path`` is the folder the ``ogb`` package lays out (``ogbl_collab/``) or a zip unpacks
to (``collab/``): ``raw/`` as for node datasets (:mod:`dsgraph.data.ogb`: ``edge.csv.gz``,
``num-node-list.csv.gz``, ``num-edge-list.csv.gz``, optional ``node-feat.csv.gz``, or
``data.npz``; ``edge_weight`` / ``edge_year`` / ``node_year`` files are not read) and
``split/<name>/{train,valid,test}.pt``: ``torch.save``d dicts of tensors, either ``edge``
(E, 2) with ``edge_neg`` (M, 2) shared negative pairs in valid/test (collab, ppa, ddi: an
undirected graph, pairs stored src < dst), or ``source_node`` / ``target_node`` (P,) with
``target_node_neg`` (P, K) negative destinations per positive (citation2: directed, pairs keep
their direction). The ``.pt`` files are read with ``torch.load(weights_only=True)``: a file
holding anything but tensors, lists and dicts is refused, never unpickled.

The graph message passing sees is the training edges (``raw/`` holds them, as OGB's graph does;
reverse edges added where the dataset's ``add_inverse_edge`` says), minus any edge repeating a
validation or test pair (:func:`dsgraph.data.link_split.apply_given_split`). A dataset without
node features (ogbl-ddi) gets two columns: 1, and log(1 + the node's number of training pairs),
since dsgraph's models read features and learn no per-node embeddings. Link prediction reads no
node labels: ``label`` is 0 and ``train_mask`` every node (placeholders for the node-task code).
Knowledge graphs (ogbl-wikikg2: relation types; ogbl-biokg: several node types) are refused.
"""
from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Optional

import dgl
import numpy as np
import torch

from dsgraph.data.arrays import finish, short_error, user_path
from dsgraph.data.link_split import GivenSplit, attach_given_split, pair_keys
from dsgraph.data.ogb import (HETERO_MARKERS, read_binary, read_csv_layout, reverse_edges_for,
                              split_folder)
from dsgraph.errors import DataError

# Per dataset (by OGB name): add_inverse_edge and the official split's folder, from OGB's
# linkproppred/master.csv.
KNOWN_LINK = {"ogbl-collab": (True, "time"), "ogbl-ppa": (True, "throughput"),
              "ogbl-ddi": (True, "target"), "ogbl-citation2": (False, "time")}
# Folder names the downloaded zips unpack to.
LINK_ALIASES = {"collab": "ogbl-collab", "ppassoc": "ogbl-ppa", "ddi": "ogbl-ddi",
                "citation-v2": "ogbl-citation2"}
KG_NAMES = ("ogbl-wikikg2", "ogbl-wikikg", "wikikg-v2", "ogbl-biokg", "biokg")
SPLIT_STEMS = {"train": "train", "val": "valid", "test": "test"}
NO_SPLIT_HINT = "an OGB link folder needs its split/<name>/{train,valid,test}.pt"


def is_link_folder(root: Path) -> bool:
    """Whether ``root`` is an OGB link-property folder: by its name, or by ``split/*/train.pt``."""
    name = root.resolve().name.lower().replace("_", "-")
    if name.startswith("ogbl-") or name in LINK_ALIASES or name in KG_NAMES:
        return True
    return any((root / "split").glob("*/train.pt"))


def load_ogb_link(path: str | os.PathLike | None, add_reverse_edges: str | bool = "auto",
                  node_split: Optional[list] = None) -> dgl.DGLGraph:
    """Read and check an OGB link-property folder; return the training graph carrying its
    official edge split (:func:`dsgraph.data.link_split.given_split`)."""
    root = user_path(path, "OGB dataset folder", "the folder holding raw/ and split/", folder=True)
    name = root.resolve().name.lower().replace("_", "-")
    raw = root / "raw"
    if name in KG_NAMES or (raw / "edge_reltype.csv.gz").exists():
        raise DataError(f"{root}: a knowledge graph (relation types: ogbl-wikikg2, ogbl-biokg); "
                        f"dsgraph's link prediction trains on homogeneous graphs")
    if node_split is not None:
        raise DataError(f"{root}: an OGB link folder ships its edge split and has no node "
                        f"labels; dataset.split (node masks) does not apply: remove it")
    if not raw.is_dir():
        raise DataError(f"{raw}: folder not found; an OGB link folder holds raw/ (edge.csv.gz, "
                        f"num-node-list.csv.gz, ...) and split/<name>/*.pt")
    for marker in HETERO_MARKERS:
        if (raw / marker).exists():
            raise DataError(f"{raw / marker}: a heterogeneous OGB dataset (several node and edge "
                            f"types, like ogbl-biokg); dsgraph trains on homogeneous graphs")
    reverse = reverse_edges_for(root, add_reverse_edges, KNOWN_LINK, LINK_ALIASES)
    if (raw / "data.npz").exists():
        src, dst, feat, n, where, _ = read_binary(raw)
    else:
        src, dst, feat, n, where = read_csv_layout(raw)
    folder = split_folder(root, KNOWN_LINK, LINK_ALIASES, NO_SPLIT_HINT)
    given = read_edge_split(folder, n)
    if feat is None:
        feat = degree_features(given, n)
        where["feat"] = f"{folder / 'train.pt'} (degree features)"
    nd = {"feat": feat, "label": np.zeros(n, dtype=np.int64),
          "train_mask": np.ones(n, dtype=bool), "val_mask": np.zeros(n, dtype=bool),
          "test_mask": np.zeros(n, dtype=bool)}
    g = finish(where, src, dst, nd, None, 0, reverse)
    return attach_given_split(g, given)


def degree_features(given: GivenSplit, n: int) -> np.ndarray:
    """1 and log(1 + training pairs at the node) per node (pairs repeating a held-out one are
    not counted: they leave the graph)."""
    train = given.pairs["train"]
    held = np.concatenate([pair_keys(p[:, 0], p[:, 1], n) for k, p in given.pairs.items()
                           if k != "train"])
    ok = ~np.isin(pair_keys(train[:, 0], train[:, 1], n), held)
    degree = np.bincount(train[ok].reshape(-1), minlength=n)
    return np.stack([np.ones(n), np.log1p(degree)], axis=1).astype(np.float32)


def read_edge_split(folder: Path, n: int) -> GivenSplit:
    """The ``train/valid/test.pt`` of ``folder`` as a checked :class:`GivenSplit`."""
    pairs, negatives, layouts = {}, {}, {}
    for split, stem in SPLIT_STEMS.items():
        p = folder / f"{stem}.pt"
        d = read_pt(p)
        if "edge" in d:
            layouts[split] = "edge"
            pairs[split] = np.sort(tensor(p, d, "edge", (None, 2), n), axis=1)
            if split != "train" and "edge_neg" in d:
                negatives[f"{split}_neg_pairs"] = tensor(p, d, "edge_neg", (None, 2), n)
        elif "source_node" in d and "target_node" in d:
            layouts[split] = "source_node/target_node"
            s, t = (tensor(p, d, k, (None,), n) for k in ("source_node", "target_node"))
            if s.shape != t.shape:
                raise DataError(f"{p}: target_node: expected {s.shape[0]} entries (as "
                                f"source_node), got {t.shape[0]}")
            pairs[split] = np.stack([s, t], axis=1)
            if split != "train" and "target_node_neg" in d:
                negatives[f"{split}_neg_dst"] = tensor(p, d, "target_node_neg", (s.shape[0], None),
                                                       n)
        else:
            raise DataError(f"{p}: missing key 'edge' (or 'source_node' and 'target_node'); "
                            f"found {', '.join(map(repr, d)) or 'none'}")
        if pairs[split].shape[0] == 0:
            raise DataError(f"{p}: expected at least one edge, got none")
        if layouts[split] != layouts["train"]:
            raise DataError(f"{p}: holds {layouts[split]} pairs but train.pt holds "
                            f"{layouts['train']}; expected one layout")
    return GivenSplit(str(folder), pairs, negatives, directed=layouts["train"] != "edge")


def read_pt(p: Path) -> dict:
    """A ``torch.save``d dict read without unpickling code (``weights_only``)."""
    if not p.is_file():
        raise DataError(f"{p}: file not found (part of the OGB link split: train.pt, valid.pt, "
                        f"test.pt)")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported (?:class|global):? (?:GLOBAL )?(\S+)", str(exc))
        if found:
            raise DataError(f"{p}: holds {found.group(1)}, which dsgraph does not unpickle "
                            f"(only tensors, lists and dicts: others can run code); save a dict "
                            f"of tensors") from None
        raise DataError(f"{p}: not a readable torch.save file ({short_error(exc)})") from None
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise DataError(f"{p}: not a readable torch.save file ({short_error(exc)})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{p}: expected a dict of tensors, got {type(obj).__name__}")
    return obj


def tensor(p: Path, d: dict, key: str, shape: tuple, n: int) -> np.ndarray:
    """``d[key]`` as int64 node ids in ``[0, n)`` of ``shape`` (None: any length)."""
    v = d[key]
    if not isinstance(v, torch.Tensor):
        raise DataError(f"{p}: {key}: expected a tensor, got {type(v).__name__}")
    if v.dtype.is_floating_point or v.dtype.is_complex or v.dtype == torch.bool:
        raise DataError(f"{p}: {key}: expected integer node ids, got dtype {v.dtype}")
    if v.dim() != len(shape) or any(w is not None and w != s for w, s in zip(shape, v.shape)):
        want = "(" + ", ".join("*" if w is None else str(w) for w in shape) + ")"
        raise DataError(f"{p}: {key}: expected shape {want}, got {tuple(v.shape)}")
    a = v.numpy().astype(np.int64)
    out = (a < 0) | (a >= n)
    if out.any():
        first = np.unravel_index(int(np.flatnonzero(out)[0]), a.shape)
        raise DataError(f"{p}: {key}: {int(out.sum())} node ids outside [0, {n}) "
                        f"(num-node-list), first {int(a[first])} at row {int(first[0])}")
    return a
