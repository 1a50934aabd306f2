"""Typed chunked folders: DGL's chunked graph format with several node / edge types, read whole
(in memory, not streamed) into the heterograph contract (:mod:`dsgraph.data.hetero.contract`),
and written.

``metadata.json`` lists ``node_type: [t1, t2, ...]`` with ``num_nodes_per_chunk`` holding one
list of per-chunk counts per type (in ``node_type``'s order), ``edge_type: ["src:rel:dst", ...]``
with ``num_edges_per_chunk`` likewise, ``edges: {"src:rel:dst": {"format": ..., "data":
[files]}}`` whose files hold each type's own node ids (0..n-1 per type), and ``node_data:
{ntype: {key: {"format": ..., "data": [files]}}}``. Exactly one type holds ``label`` (the target
type: integer class ids, -1 = unlabelled, or floats with NaN = unlabelled) and either all of
``train_mask`` / ``val_mask`` / ``test_mask`` or none (then ``split`` fractions are drawn); a
type with features holds ``feat``; other keys and ``edge_data`` are ignored. The metadata,
file and count checks are :class:`dsgraph.data.chunked.folder.MetadataParser`'s, shared with the
streamed single-type reader; every problem is one :class:`DataError` line naming the file or
the metadata key.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from dsgraph.data.chunked.folder import (METADATA, MetadataParser, check_ids, load_json,
                                         metadata_path, read_node_data)
from dsgraph.data.chunked.io import (EDGE_FORMATS, NODE_FORMATS, SUFFIXES, NodeFile, even_sizes,
                                     read_edge_file, write_edge_file, write_node_blocks)
from dsgraph.data.chunked.write import check_out_folder
from dsgraph.data.split import MASKS
from dsgraph.errors import DataError, UserError
from dsgraph.fsutil import atomic_dir, storage_errors

if TYPE_CHECKING:
    import dgl

    from dsgraph.data.arrays import Sources

Etype = tuple[str, str, str]
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a type name usable as a file name


def is_hetero_chunked(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` is a chunked folder (or metadata file) of several node or edge types, or
    of an edge type between two different types; reads metadata.json only (an unreadable one is
    left to the reader to report)."""
    if not path:
        return False
    try:
        meta = load_json(metadata_path(path))
    except DataError:
        return False
    ntypes, etypes = meta.get("node_type"), meta.get("edge_type")
    if any(isinstance(v, list) and len(v) > 1 for v in (ntypes, etypes)):
        return True
    ends = etypes[0].split(":") if isinstance(etypes, list) and etypes and \
        isinstance(etypes[0], str) else []
    return len(ends) == 3 and ends[0] != ends[2]


def load_chunked_hetero(path: str | os.PathLike, add_reverse_edges: str | bool = "auto",
                        split: Optional[Sequence[float]] = None, seed: int = 0) -> "dgl.DGLGraph":
    """Read and check a typed chunked folder; return the heterograph (reverse relations added
    unless ``add_reverse_edges`` is False; ``split`` fractions replace the folder's masks)."""
    # DGL, torch and the array checks load here: detecting a typed folder needs none of them
    from dsgraph.data.arrays import Sources, check_feat, check_label, label_columns, resolve_masks
    from dsgraph.data.hetero.contract import assemble
    p = MetadataParser.load(path)
    ntypes = p.names("node_type")
    canonical = p.edge_types(ntypes)
    seen: dict[str, str] = {}
    for s, r, d in canonical:
        if r in seen:  # the trainer keys per-relation weights by the relation name alone
            raise p.fail("edge_type", f"relation {r!r} names two edge types, {seen[r]!r} and "
                                      f"'{s}:{r}:{d}'; expected relation names unique")
        seen[r] = f"{s}:{r}:{d}"
    names = [":".join(c) for c in canonical]
    counts = {t: sum(c) for t, c in zip(ntypes, p.counts("num_nodes_per_chunk", ntypes))}
    edge_counts = p.counts("num_edges_per_chunk", names)
    specs = p.edge_specs(names, edge_counts)
    files = p.node_data(counts)
    p.get("edge_data", dict, default={})  # accepted, not used: the partitions hold node data
    target = _target(p, files)
    where = Sources(f"{p.meta_path} node_data.{target}",
                    **{k: f"{p.meta_path} node_data.{target}.{k}" for k in ("label", *MASKS)})
    n = counts[target]
    label = read_node_data("label", files[target]["label"], n)
    if label.ndim == 2 and label.shape[1] == 1:
        label = label[:, 0]
    if label.dtype.kind in "iu":
        label = check_label(where, label, n, unlabelled_ok=True)
    else:  # floats: NaN = unlabelled, as OGB and CSV label files
        label = label_columns(where["label"], label if label.ndim == 2 else label[:, None],
                              "class")
    nd = {"label": label, **{k: read_node_data(k, files[target][k], n)
                             for k in MASKS if k in files[target]}}
    masks = resolve_masks(where, nd, n, split, seed)
    if split is None:
        _disjoint(where, target, masks)
    feats = {}
    for t in ntypes:
        if "feat" in files[t]:
            feat = read_node_data("feat", files[t]["feat"], counts[t])
            feats[t] = feat[:, None] if feat.ndim == 1 else feat
            check_feat(Sources(f"{p.meta_path} node_data.{t}.feat"), feats[t])
    edges = {c: _relation(c, *specs[name], edge_counts[i], counts)
             for i, (c, name) in enumerate(zip(canonical, names))}
    return assemble(edges, counts, feats, target, label, masks, add_reverse_edges is not False)


def _target(p: MetadataParser, files: dict[str, dict[str, list[NodeFile]]]) -> str:
    """The one node type holding ``label``; masks on no other type."""
    labelled = [t for t, keys in files.items() if "label" in keys]
    if len(labelled) != 1:
        raise p.fail("node_data", f"expected 'label' on one node type (the target type), got "
                                  f"{labelled or 'none'} among node types {list(files)!r:.200}")
    for t, keys in files.items():
        mask = next((k for k in MASKS if k in keys), None)
        if t != labelled[0] and mask:
            raise p.fail(f"node_data.{t}.{mask}", f"masks belong to the target type "
                                                  f"{labelled[0]!r} (the one with 'label')")
    return labelled[0]


def _disjoint(where: "Sources", target: str, masks: dict[str, np.ndarray]) -> None:
    """The folder's own masks, disjoint (the contract's), else one line naming the first node."""
    total = sum(masks[k].astype(np.int64) for k in MASKS)
    if (total > 1).any():
        first = int(np.flatnonzero(total > 1)[0])
        raise DataError(f"{where.default}: {target} node {first} is in several of train_mask, "
                        f"val_mask, test_mask; expected disjoint masks")


def _relation(c: Etype, fmt: str, delimiter: str, paths: list[Path], chunk_counts: list[int],
              counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """One edge type's ``(src, dst)``, chunk by chunk, each end within its type's node range."""
    total = sum(chunk_counts)
    src, dst = np.empty(total, np.int64), np.empty(total, np.int64)
    lo = 0
    for chunk, (path, m) in enumerate(zip(paths, chunk_counts)):
        s, d = read_edge_file(path, fmt, delimiter, m)
        check_ids(path, chunk, "src", s, counts[c[0]], c[0])
        check_ids(path, chunk, "dst", d, counts[c[2]], c[2])
        src[lo:lo + m], dst[lo:lo + m] = s, d
        lo += m
    return src, dst


# ---------------------------------------------------------------- writing


def write_hetero_chunked(g: "dgl.DGLGraph", out: str | os.PathLike, chunks: int = 2, *,
                         edge_format: str = "numpy", node_format: str = "numpy",
                         graph_name: str = "graph", force: bool = False) -> Path:
    """Write a heterograph (every relation as it holds it, every node-data key of every type)
    as a typed chunked folder of ``chunks`` even chunks per type, atomically; returns the
    metadata path."""
    out = Path(out)
    if edge_format not in EDGE_FORMATS or node_format not in NODE_FORMATS:
        raise UserError(f"write_hetero_chunked: formats: expected edges in {list(EDGE_FORMATS)} "
                        f"and node data in {list(NODE_FORMATS)}, got {edge_format!r}, "
                        f"{node_format!r}")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise UserError(f"write_hetero_chunked: chunks: expected an integer >= 1, got {chunks!r}")
    odd = next((t for c in g.canonical_etypes for t in c if ":" in t or not t), None)
    if odd is not None:
        raise UserError(f"write_hetero_chunked: type or relation name {odd!r}: expected a "
                        f"non-empty name without ':' (the format joins them as src:rel:dst)")
    check_out_folder(out, force)
    with storage_errors(out), atomic_dir(out, force=force) as tmp:
        (tmp / "edges").mkdir()
        node_counts, node_data = [], {}
        for i, t in enumerate(g.ntypes):
            n = g.num_nodes(t)
            sizes = even_sizes(n, min(chunks, max(1, n)))
            data = {k: v.numpy() for k, v in g.nodes[t].data.items()}
            if not data:
                node_counts.append(sizes)
                continue
            sub = t if _PLAIN.fullmatch(t) else f"ntype{i}"
            (tmp / sub / "node_data").mkdir(parents=True)
            bounds = np.cumsum([0, *sizes])
            blocks = ({k: v[lo:hi] for k, v in data.items()}
                      for lo, hi in zip(bounds[:-1], bounds[1:]))
            try:
                written, meta = write_node_blocks(tmp / sub, n, blocks, node_format)
            except DataError as exc:  # the block's own message, named after the type
                raise DataError(f"{out}: node type {t!r}: {exc}") from None
            node_counts.append(written)
            node_data[t] = {k: {**v, "data": [f"{sub}/{f}" for f in v["data"]]}
                            for k, v in meta.items()}
        edge_counts, edges, used = [], {}, set()
        for j, c in enumerate(g.canonical_etypes):
            src, dst = (x.numpy().astype(np.int64) for x in g.edges(etype=c, order="eid"))
            sizes = even_sizes(len(src), min(chunks, max(1, len(src))))
            bounds = np.cumsum([0, *sizes])
            sub = c[1] if _PLAIN.fullmatch(c[1]) and c[1] not in used else f"etype{j}"
            used.add(sub)
            names = [f"edges/{sub}-{k}.{SUFFIXES[edge_format]}" for k in range(len(sizes))]
            for name, lo, hi in zip(names, bounds[:-1], bounds[1:]):
                write_edge_file(tmp / name, src[lo:hi], dst[lo:hi], edge_format)
            fmt = {"name": edge_format, **({"delimiter": " "} if edge_format == "csv" else {})}
            edges[":".join(c)] = {"format": fmt, "data": names}
            edge_counts.append(sizes)
        meta = {"graph_name": graph_name, "node_type": list(g.ntypes),
                "num_nodes_per_chunk": node_counts, "edge_type": list(edges),
                "num_edges_per_chunk": edge_counts, "edges": edges, "node_data": node_data,
                "edge_data": {}}
        (tmp / METADATA).write_text(json.dumps(meta, indent=2))
    return out / METADATA
