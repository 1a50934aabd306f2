"""Writing DGL's chunked graph format for one node type and one edge type, streaming: each
edge chunk and node block goes to its own files as it arrives, ``metadata.json`` last, all in a
temporary folder renamed into place at the end (:func:`write_chunked`), from any
:class:`~dsgraph.data.chunked.contract.GraphChunks` (:func:`write_graph_chunks`). Typed folders
(several node / edge types) are written by :func:`dsgraph.data.hetero.chunked.write_hetero_chunked`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from dsgraph.data.chunked.folder import MAX_NODES, METADATA, is_count
from dsgraph.data.chunked.io import (EDGE_FORMATS, NODE_FORMATS, SUFFIXES, even_sizes,
                                     fixed_sizes, rechunk, write_edge_file, write_node_blocks)
from dsgraph.data.chunked.contract import GraphChunks, iter_edges
from dsgraph.errors import DataError, UserError
from dsgraph.fsutil import atomic_dir, storage_errors

NODE_CHUNK_BYTES = 256 << 20  # write_graph_chunks' default node chunk (all keys' rows together)


def write_chunked(out: str | os.PathLike, num_nodes: int,
                  edges: Iterable[tuple[np.ndarray, np.ndarray]],
                  node_blocks: Iterable[dict[str, np.ndarray]], *, graph_name: str = "graph",
                  edge_format: str = "parquet", node_format: str = "numpy",
                  force: bool = False) -> Path:
    """Write a chunked graph folder streaming: each edge chunk and node block to its own files
    as it arrives, ``metadata.json`` last, all in a temporary folder renamed to ``out`` at the
    end. Node blocks cover nodes ``0 ..`` in order, with the same keys each time. Returns the
    metadata path."""
    out = Path(out)
    if edge_format not in EDGE_FORMATS or node_format not in NODE_FORMATS:
        raise UserError(f"write_chunked: formats: expected edges in {list(EDGE_FORMATS)} and node "
                        f"data in {list(NODE_FORMATS)}, got {edge_format!r}, {node_format!r}")
    if not is_count(num_nodes) or num_nodes > MAX_NODES:
        raise UserError(f"write_chunked: num_nodes: expected an integer in [0, {MAX_NODES}], "
                        f"got {num_nodes!r}")
    if not isinstance(graph_name, str) or not graph_name:
        raise UserError(f"write_chunked: graph_name: expected a non-empty string, "
                        f"got {graph_name!r}")
    check_out_folder(out, force)
    ntype, etype = "_N", "_N:_E:_N"
    with storage_errors(out), atomic_dir(out, force=force) as tmp:
        (tmp / "edges").mkdir()
        (tmp / "node_data").mkdir()
        try:
            edge_counts, edge_names = _write_edges(tmp, num_nodes, edges, edge_format)
            node_counts, node_meta = write_node_blocks(tmp, num_nodes, node_blocks, node_format)
        except DataError as exc:  # the chunk's own message, named after the folder being written
            raise DataError(f"{out}: {exc}") from None
        edge_fmt = {"name": edge_format, **({"delimiter": " "} if edge_format == "csv" else {})}
        meta = {"graph_name": graph_name, "node_type": [ntype],
                "num_nodes_per_chunk": [node_counts], "edge_type": [etype],
                "num_edges_per_chunk": [edge_counts],
                "edges": {etype: {"format": edge_fmt, "data": edge_names}},
                "node_data": {ntype: node_meta} if node_meta else {}, "edge_data": {}}
        (tmp / METADATA).write_text(json.dumps(meta, indent=2))
    return out / METADATA


def check_out_folder(out: Path, force: bool) -> None:
    """UserError unless ``out`` is absent, or (with ``force``) empty or a chunked folder: a
    user's other folder is never replaced."""
    if out.exists() and not force:
        raise UserError(f"{out}: already exists; pass force to replace it")
    if out.exists() and not (out.is_dir() and (out / METADATA).is_file()
                             or out.is_dir() and not any(out.iterdir())):
        raise UserError(f"{out}: not a chunked graph folder (no {METADATA}); "
                        f"refusing to replace it")


def _write_edges(tmp: Path, num_nodes: int, edges: Iterable[tuple[np.ndarray, np.ndarray]],
                 fmt: str) -> tuple[list[int], list[str]]:
    counts, names = [], []
    empty = np.empty(0, dtype=np.int64)
    for i, (src, dst) in enumerate(edges):
        src, dst = np.asarray(src), np.asarray(dst)
        if src.ndim != 1 or src.shape != dst.shape or src.dtype.kind not in "iu" \
                or dst.dtype.kind not in "iu":
            raise DataError(f"edge chunk {i}: expected two 1-D integer arrays of one length, got "
                            f"{src.dtype}{list(src.shape)} and {dst.dtype}{list(dst.shape)}")
        for ids in (src, dst):
            if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
                raise DataError(f"edge chunk {i}: node ids in [{ids.min()}, {ids.max()}], "
                                f"expected [0, {num_nodes})")
        names.append(f"edges/edges-{i}.{SUFFIXES[fmt]}")
        write_edge_file(tmp / names[-1], src.astype(np.int64, copy=False),
                        dst.astype(np.int64, copy=False), fmt)
        counts.append(len(src))
    if not counts:  # DGL's tools expect at least one edge file
        names.append(f"edges/edges-0.{SUFFIXES[fmt]}")
        write_edge_file(tmp / names[-1], empty, empty, fmt)
        counts.append(0)
    return counts, names


def write_graph_chunks(source: GraphChunks, out: str | os.PathLike, *,
                       num_chunks: int | None = None, chunk_rows: int | None = None,
                       **format_kwargs: Any) -> Path:
    """Write any :class:`GraphChunks` (``InMemoryChunks(dgl_graph)``, a chunked folder) in the
    chunked format: ``num_chunks`` even chunks of edges and of nodes (as DGL's chunk_graph),
    or chunks of ``chunk_rows`` (the last shorter); by default the source's edge chunks and
    node chunks of about ``NODE_CHUNK_BYTES``. ``format_kwargs`` go to :func:`write_chunked`."""
    if num_chunks is not None and chunk_rows is not None:
        raise UserError("write_graph_chunks: give num_chunks or chunk_rows, not both")
    for name, value in (("num_chunks", num_chunks), ("chunk_rows", chunk_rows)):
        if value is not None and not (is_count(value) and value >= 1):
            raise UserError(f"write_graph_chunks: {name}: expected an integer >= 1, got {value!r}")
    keys = source.node_keys()
    n, e = source.num_nodes, source.num_edges
    if num_chunks is not None:
        edge_sizes, node_sizes = even_sizes(e, num_chunks), even_sizes(n, num_chunks)
    else:
        edge_sizes = (fixed_sizes(e, chunk_rows) if chunk_rows
                      else [int(x) for x in np.diff(source.edge_offsets())])
        row_bytes = max(1, sum(k.row_bytes for k in keys))
        node_sizes = fixed_sizes(n, chunk_rows or max(1, NODE_CHUNK_BYTES // row_bytes))
    empty64 = np.empty(0, dtype=np.int64)
    edges = rechunk(((s, d) for _, s, d in iter_edges(source)), edge_sizes, (empty64, empty64))
    columns = [rechunk(((rows,) for _, rows in source.iter_node_data(k.name)), node_sizes,
                        (np.empty((0, *k.row_shape), dtype=k.dtype),)) for k in keys]
    blocks = ({k.name: col[0] for k, col in zip(keys, cols)} for cols in zip(*columns))
    return write_chunked(out, n, edges, blocks if keys else [], **format_kwargs)
