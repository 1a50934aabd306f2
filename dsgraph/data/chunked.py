"""DGL's chunked graph format: a folder opened and validated up front, read chunk by chunk.

The folder holds ``metadata.json`` (``graph_name``, ``node_type``, ``num_nodes_per_chunk``,
``edge_type``, ``num_edges_per_chunk``, ``edges``, ``node_data``, ``edge_data``) and the data
files it lists, by paths relative to the folder or absolute; the layout DGL's
``tools/chunk_graph.py`` writes and its ``dispatch_data.py`` and GraphStorm's ``gpartition``
read. Cheap checks (metadata, file existence, ``.npy`` headers, parquet footers, node-data row
totals and shapes) happen when the folder is opened; an edge chunk's count, dtype and id range
are checked when it is read. Only one node type and one edge type are supported; ``edge_data``
is accepted and ignored (partitions hold node data only). :func:`write_chunked` writes the
format streaming, one chunk in memory at a time.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from dsgraph.data.chunked_io import (EDGE_FORMATS, NODE_FORMATS, SUFFIXES, NodeFile,
                                     edge_file_rows, even_sizes, fixed_sizes, npy_blocks, npy_info,
                                     parquet_blocks, parquet_layout, read_edge_file, rechunk,
                                     write_edge_file, write_node_blocks)
from dsgraph.data.chunks import GraphChunks, NodeKey, iter_edges
from dsgraph.errors import DataError, UserError
from dsgraph.fsutil import atomic_dir, storage_errors

if TYPE_CHECKING:
    import dgl

METADATA = "metadata.json"
MAX_METADATA_BYTES = 64 << 20  # a metadata file of lists of counts and paths is far smaller
MAX_NODES = 2 ** 31
MAX_EDGES = 2 ** 48
BLOCK_BYTES = 64 << 20  # the most one iter_node_data block holds


def open_chunked(path: str | os.PathLike, block_bytes: int = BLOCK_BYTES) -> "ChunkedGraph":
    """Open a chunked graph folder (or its metadata file, whatever its name: DGL's guide calls it
    ``meta.json``); every cheap check is done here."""
    root = Path(path)
    meta_path = root if root.is_file() else root / METADATA
    root = meta_path.parent
    if not root.is_dir():
        raise DataError(f"{root}: chunked graph folder not found")
    if not meta_path.is_file():
        raise DataError(f"{meta_path}: not found (expected the chunked graph's {METADATA})")
    meta = _load_json(meta_path)
    return _Parser(meta_path, meta).graph(block_bytes)


def _load_json(meta_path: Path) -> dict:
    try:
        size = meta_path.stat().st_size
        if size > MAX_METADATA_BYTES:
            raise DataError(f"{meta_path}: {size} bytes, expected at most {MAX_METADATA_BYTES}")
        meta = json.loads(meta_path.read_bytes())
    except OSError as exc:
        raise DataError(f"{meta_path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{meta_path}: not valid JSON: {exc}") from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise DataError(f"{meta_path}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path}: expected a JSON object, got {type(meta).__name__}")
    return meta


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Parser:
    """Reads and checks metadata.json's entries, naming the entry in every error."""

    def __init__(self, meta_path: Path, meta: dict) -> None:
        self.meta_path, self.meta, self.root = meta_path, meta, meta_path.parent

    def fail(self, key: str, what: str) -> DataError:
        return DataError(f"{self.meta_path}: {key}: {what}")

    def get(self, key: str, kind: type, default: Any = None) -> Any:
        if key not in self.meta and default is not None:
            return default
        value = self.meta.get(key)
        if not isinstance(value, kind):
            got = "nothing" if value is None else type(value).__name__
            raise self.fail(key, f"expected a {kind.__name__}, got {got}")
        return value

    def one_name(self, key: str) -> str:
        names = self.get(key, list)
        if len(names) != 1 or not isinstance(names[0], str) or not names[0]:
            raise self.fail(key, f"only one {key.replace('_', ' ')} is supported (a homogeneous "
                                 f"graph), got {names!r:.200}")
        return names[0]

    def counts(self, key: str) -> list[int]:
        lists = self.get(key, list)
        if len(lists) != 1 or not isinstance(lists[0], list):
            raise self.fail(key, "expected one list of counts (one type)")
        bad = next((c for c in lists[0] if not _is_count(c)), None)
        if bad is not None or (not lists[0] and key == "num_nodes_per_chunk"):
            raise self.fail(key, f"expected non-negative integers, got {bad!r:.80}")
        return lists[0]

    def spec(self, where: str, spec: Any, formats: tuple[str, ...]) -> tuple[str, str, list[Path]]:
        """``(format, delimiter, files)`` of a ``{"format": ..., "data": [...]}`` entry."""
        if not isinstance(spec, dict) or not isinstance(spec.get("format"), dict):
            raise self.fail(where, 'expected {"format": {"name": ...}, "data": [files]}')
        fmt = spec["format"].get("name")
        if fmt not in formats:
            raise self.fail(f"{where}.format.name",
                            f"expected one of {list(formats)}, got {fmt!r:.80}")
        delimiter = spec["format"].get("delimiter", ",")
        if fmt == "csv" and not (isinstance(delimiter, str) and len(delimiter) == 1
                                 and delimiter not in "\r\n\""):
            raise self.fail(f"{where}.format.delimiter",
                            f"expected one character, got {delimiter!r:.80}")
        files = spec.get("data")
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            raise self.fail(f"{where}.data", "expected a list of file paths")
        return fmt, delimiter, [self.file(f"{where}.data", f) for f in files]

    def file(self, where: str, name: str) -> Path:
        path = Path(name) if os.path.isabs(name) else self.root / name
        if not path.exists():
            raise DataError(f"{path}: not found (listed in {self.meta_path} {where})")
        if not path.is_file():
            raise DataError(f"{path}: expected a regular file (listed in {self.meta_path} {where})")
        return path

    def graph(self, block_bytes: int) -> "ChunkedGraph":
        ntype, etype = self.one_name("node_type"), self.one_name("edge_type")
        parts = etype.split(":")
        if len(parts) != 3 or parts[0] != ntype or parts[2] != ntype:
            raise self.fail("edge_type",
                            f"expected '{ntype}:<relation>:{ntype}', got {etype!r:.80}")
        name = self.get("graph_name", str, default=self.root.name)
        num_nodes = sum(self.counts("num_nodes_per_chunk"))
        if num_nodes > MAX_NODES:
            raise self.fail("num_nodes_per_chunk", f"{num_nodes} nodes, at most {MAX_NODES}")
        edge_counts = self.counts("num_edges_per_chunk")
        if sum(edge_counts) > MAX_EDGES:
            raise self.fail("num_edges_per_chunk", f"{sum(edge_counts)} edges, at most {MAX_EDGES}")
        edges = self.get("edges", dict)
        if set(edges) != {etype}:
            raise self.fail("edges", f"expected one entry, {etype!r}, got {sorted(edges)!r:.200}")
        fmt, delimiter, files = self.spec(f"edges.{etype}", edges[etype], EDGE_FORMATS)
        if len(files) != len(edge_counts):
            raise self.fail(f"edges.{etype}.data", f"expected {len(edge_counts)} files "
                                                   f"(num_edges_per_chunk), got {len(files)}")
        for path, count in zip(files, edge_counts):
            rows = edge_file_rows(path, fmt)
            if rows is not None and rows != count:
                raise DataError(f"{path}: holds {rows} edges, {self.meta_path} num_edges_per_chunk "
                                f"says {count}")
        node_data = self.get("node_data", dict, default={})
        if set(node_data) - {ntype}:
            raise self.fail("node_data", f"node types {sorted(set(node_data) - {ntype})!r:.200} "
                                         f"are not in node_type {[ntype]}")
        keys = self.get_keys(node_data.get(ntype, {}), ntype, num_nodes)
        self.get("edge_data", dict, default={})  # accepted, not used: partitions hold node data
        return ChunkedGraph(self.root, name, ntype, etype, num_nodes, edge_counts, fmt, delimiter,
                            files, keys, block_bytes)

    def get_keys(self, specs: Any, ntype: str, num_nodes: int) -> dict[str, list[NodeFile]]:
        if not isinstance(specs, dict):
            raise self.fail(f"node_data.{ntype}", "expected an object of node-data keys")
        keys = {}
        for key, spec in specs.items():
            where = f"node_data.{ntype}.{key}"
            fmt, _, paths = self.spec(where, spec, NODE_FORMATS)
            if not paths:
                raise self.fail(f"{where}.data", "expected at least one file, got none")
            files = []
            for path in paths:
                layout = parquet_layout(path) if fmt == "parquet" else None
                info = layout.info if layout else npy_info(path)
                first = files[0].info if files else info
                if (info.dtype, info.row_shape) != (first.dtype, first.row_shape):
                    raise DataError(f"{path}: rows of shape {info.row_shape} and dtype "
                                    f"{info.dtype}, expected {first.row_shape} and {first.dtype} "
                                    f"as in {files[0].path.name} ({where})")
                files.append(NodeFile(path, fmt, info, layout))
            total = sum(f.info.rows for f in files)
            if total != num_nodes:
                raise self.fail(where, f"its files hold {total} rows, expected {num_nodes} "
                                       f"(the sum of num_nodes_per_chunk)")
            keys[key] = files
        return keys


def _is_mask(name: str, dtype: np.dtype) -> bool:
    return name.endswith("_mask") and dtype.kind in "biu"


class ChunkedGraph:
    """A chunked graph folder seen through :class:`dsgraph.data.chunks.GraphChunks`."""

    def __init__(self, root: Path, graph_name: str, ntype: str, etype: str, num_nodes: int,
                 edge_counts: list[int], edge_format: str, delimiter: str, edge_files: list[Path],
                 node_files: dict[str, list[NodeFile]], block_bytes: int = BLOCK_BYTES) -> None:
        self.root, self.graph_name, self.ntype, self.etype = root, graph_name, ntype, etype
        self.num_nodes = num_nodes
        self.num_edges = int(sum(edge_counts))
        self.edge_format, self.delimiter = edge_format, delimiter
        self.edge_files, self.node_files = edge_files, node_files
        self.block_bytes = block_bytes
        self._offsets = np.concatenate([[0], np.cumsum(edge_counts, dtype=np.int64)])

    def __repr__(self) -> str:
        return (f"ChunkedGraph({str(self.root)!r}, graph_name={self.graph_name!r}, "
                f"num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"edge_chunks={self.num_edge_chunks}, node_keys={sorted(self.node_files)})")

    @property
    def num_edge_chunks(self) -> int:
        """One chunk per edge file."""
        return len(self.edge_files)

    def edge_offsets(self) -> np.ndarray:
        """Chunk boundaries in edge ids, from ``num_edges_per_chunk``."""
        return self._offsets.copy()

    def read_edges(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """One edge file's ``(src, dst)`` as int64, its count and id range checked.

        Memory: 16 bytes an edge plus the parse buffer (a CSV of 50M lines, ~1 GB of text, is
        parsed in 16 MiB blocks into the 800 MB of id arrays).
        """
        if not 0 <= chunk < self.num_edge_chunks:
            raise IndexError(f"edge chunk {chunk} of {self.num_edge_chunks}")
        path = self.edge_files[chunk]
        expected = int(self._offsets[chunk + 1] - self._offsets[chunk])
        src, dst = read_edge_file(path, self.edge_format, self.delimiter, expected)
        for name, ids in (("src", src), ("dst", dst)):
            if len(ids) and (ids.min() < 0 or ids.max() >= self.num_nodes):
                i = int(np.flatnonzero((ids < 0) | (ids >= self.num_nodes))[0])
                raise DataError(f"{path}: edge {i} (chunk {chunk}): {name} {ids[i]} is out of "
                                f"range, expected node ids in [0, {self.num_nodes})")
        return src, dst

    def node_keys(self) -> list[NodeKey]:
        """Every node-data key, sorted by name (integer ``*_mask`` keys read as bool)."""
        out = []
        for name in sorted(self.node_files):
            info = self.node_files[name][0].info
            dtype = np.dtype(bool) if _is_mask(name, info.dtype) else info.dtype
            out.append(NodeKey(name, dtype, info.row_shape))
        return out

    def iter_node_data(self, key: str) -> Iterator[tuple[int, np.ndarray]]:
        """``(first node id, rows)`` blocks of at most ``block_bytes`` each, copied out of the
        files (a memmap slice or a parquet batch), in node order."""
        files = self.node_files[key]
        info = files[0].info
        row_bytes = NodeKey(key, info.dtype, info.row_shape).row_bytes
        max_rows = max(1, self.block_bytes // max(1, row_bytes))
        start = 0
        for f in files:
            blocks = (npy_blocks(f.path, f.info, max_rows) if f.layout is None
                      else parquet_blocks(f.path, f.layout, max_rows))
            for rows in blocks:
                if _is_mask(key, info.dtype) and rows.dtype != bool:
                    if rows.size and (rows.min() < 0 or rows.max() > 1):
                        raise DataError(f"{f.path}: mask {key!r} holds values other than 0/1")
                    rows = rows.astype(bool)
                yield start, rows
                start += len(rows)

    def to_dgl(self) -> "dgl.DGLGraph":
        """The whole graph in memory, ``ndata`` for every key (masks as ``torch.bool``)."""
        import dgl  # here: streaming readers need neither DGL nor torch (~400 MiB of RSS)
        import torch
        src = np.empty(self.num_edges, dtype=np.int64)
        dst = np.empty(self.num_edges, dtype=np.int64)
        for c in range(self.num_edge_chunks):
            lo, hi = self._offsets[c], self._offsets[c + 1]
            src[lo:hi], dst[lo:hi] = self.read_edges(c)
        g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=self.num_nodes)
        for spec in self.node_keys():
            values = np.empty((self.num_nodes, *spec.row_shape), dtype=spec.dtype)
            for start, rows in self.iter_node_data(spec.name):
                values[start:start + len(rows)] = rows
            if values.dtype.kind == "u" and values.dtype != np.uint8:  # torch lacks these types
                if values.size and values.max() > np.iinfo(np.int64).max:
                    raise DataError(f"{self.root}: node data {spec.name!r}: values beyond int64")
                values = values.astype(np.int64)
            g.ndata[spec.name] = torch.from_numpy(values)
        return g


# ---------------------------------------------------------------- writing

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
    if not _is_count(num_nodes) or num_nodes > MAX_NODES:
        raise UserError(f"write_chunked: num_nodes: expected an integer in [0, {MAX_NODES}], "
                        f"got {num_nodes!r}")
    if not isinstance(graph_name, str) or not graph_name:
        raise UserError(f"write_chunked: graph_name: expected a non-empty string, "
                        f"got {graph_name!r}")
    if out.exists() and not force:
        raise UserError(f"{out}: already exists; pass force to replace it")
    if out.exists() and not (out.is_dir() and (out / METADATA).is_file() or _empty_dir(out)):
        raise UserError(f"{out}: not a chunked graph folder (no {METADATA}); "
                        f"refusing to replace it")
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


def _empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


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
        if value is not None and not (_is_count(value) and value >= 1):
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
