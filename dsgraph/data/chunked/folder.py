"""DGL's chunked graph format: a folder opened and validated up front, read chunk by chunk.

The folder holds ``metadata.json`` (``graph_name``, ``node_type``, ``num_nodes_per_chunk``,
``edge_type``, ``num_edges_per_chunk``, ``edges``, ``node_data``, ``edge_data``) and the data
files it lists, by paths relative to the folder or absolute; the layout DGL's
``tools/chunk_graph.py`` writes and its ``dispatch_data.py`` and GraphStorm's ``gpartition``
read. Cheap checks (metadata, file existence, ``.npy`` headers, parquet footers, CSV sizes,
node-data row totals and shapes) happen when the folder is opened; an edge chunk's count, dtype
and id range are checked when it is read. :class:`ChunkedGraph` (streamed) holds one node type
and one edge type; a folder of several types (a heterogeneous graph) is read whole, in memory,
by :mod:`dsgraph.data.hetero.chunked`, with the same metadata checks (:class:`MetadataParser`).
``edge_data`` is accepted and ignored (partitions hold node data only).
:mod:`dsgraph.data.chunked.write` writes the format streaming, one chunk in memory at a time.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from dsgraph.data.chunked.io import (EDGE_FORMATS, NODE_FORMATS, NodeFile, edge_file_rows,
                                     npy_blocks, npy_info, parquet_blocks, parquet_layout,
                                     read_edge_file)
from dsgraph.data.chunked.contract import NodeKey
from dsgraph.errors import DataError

if TYPE_CHECKING:
    import dgl

METADATA = "metadata.json"
MAX_METADATA_BYTES = 64 << 20  # a metadata file of lists of counts and paths is far smaller
MAX_NODES = 2 ** 31
MAX_EDGES = 2 ** 48
BLOCK_BYTES = 64 << 20  # the most one iter_node_data block holds
MIN_CSV_EDGE_BYTES = 4  # "0 0\n": a CSV of fewer bytes cannot hold its stated edges
EdgeSpec = tuple[str, str, list[Path]]  # format, delimiter, files


def metadata_path(path: str | os.PathLike) -> Path:
    """The metadata file of a chunked folder (or the file itself, whatever its name: DGL's guide
    calls it ``meta.json``), checked to exist."""
    root = Path(path)
    meta_path = root if root.is_file() else root / METADATA
    if not meta_path.parent.is_dir():
        raise DataError(f"{meta_path.parent}: chunked graph folder not found")
    if not meta_path.is_file():
        raise DataError(f"{meta_path}: not found (expected the chunked graph's {METADATA})")
    return meta_path


def open_chunked(path: str | os.PathLike, block_bytes: int = BLOCK_BYTES) -> "ChunkedGraph":
    """Open a chunked graph folder of one node type and one edge type (or its metadata file);
    every cheap check is done here."""
    return MetadataParser.load(path).graph(block_bytes)


def load_json(meta_path: Path) -> dict:
    """``metadata.json`` as a dict, its size bounded; anything else is a one-line DataError."""
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


def is_count(value: Any) -> bool:
    """A JSON count: a non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class MetadataParser:
    """Reads and checks metadata.json's entries, naming the entry in every error."""

    def __init__(self, meta_path: Path, meta: dict) -> None:
        self.meta_path, self.meta, self.root = meta_path, meta, meta_path.parent

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MetadataParser":
        """The parser of a folder's (or a metadata file's) metadata."""
        meta_path = metadata_path(path)
        return cls(meta_path, load_json(meta_path))

    def fail(self, key: str, what: str) -> DataError:
        """The error for a bad entry: ``<metadata file>: <key>: <what>``."""
        return DataError(f"{self.meta_path}: {key}: {what}")

    def get(self, key: str, kind: type, default: Any = None) -> Any:
        """Entry ``key``, of type ``kind`` (``default`` when absent, if given)."""
        if key not in self.meta and default is not None:
            return default
        value = self.meta.get(key)
        if not isinstance(value, kind):
            got = "nothing" if value is None else type(value).__name__
            raise self.fail(key, f"expected a {kind.__name__}, got {got}")
        return value

    def names(self, key: str) -> list[str]:
        """``node_type`` / ``edge_type``: at least one name, each non-empty and listed once."""
        names = self.get(key, list)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise self.fail(key, f"expected a list of non-empty names, got {names!r:.200}")
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:
            raise self.fail(key, f"{twice!r:.80} is listed twice")
        return names

    def edge_types(self, ntypes: list[str]) -> list[tuple[str, str, str]]:
        """``edge_type`` as canonical ``(src, relation, dst)``, both ends in ``ntypes``."""
        out = []
        for name in self.names("edge_type"):
            parts = tuple(name.split(":"))
            if len(parts) != 3 or not all(parts):
                raise self.fail("edge_type", f"expected '<source type>:<relation>:<destination "
                                             f"type>', got {name!r:.80}")
            unknown = next((t for t in (parts[0], parts[2]) if t not in ntypes), None)
            if unknown is not None:
                raise self.fail("edge_type", f"{name!r:.80}: node type {unknown!r:.80} is not in "
                                             f"node_type {ntypes!r:.200}")
            out.append(parts)
        return out

    def counts(self, key: str, types: list[str]) -> list[list[int]]:
        """One list of per-chunk counts per type (in ``types``' order), totals within limits."""
        lists = self.get(key, list)
        names = "node_type" if key == "num_nodes_per_chunk" else "edge_type"
        if len(lists) != len(types) or not all(isinstance(c, list) for c in lists):
            raise self.fail(key, f"expected {len(types)} lists of counts (one per entry of "
                                 f"{names}), got {lists!r:.120}")
        for t, counts in zip(types, lists):
            bad = [c for c in counts if not is_count(c)]
            if bad or (not counts and names == "node_type"):
                got = repr(bad[0])[:80] if bad else "an empty list"
                raise self.fail(key, f"{t}: expected non-negative integers, got {got}")
        limit, what = (MAX_NODES, "nodes") if names == "node_type" else (MAX_EDGES, "edges")
        total = sum(map(sum, lists))  # checked before anything of that size is allocated
        if total > limit:
            raise self.fail(key, f"{total} {what}, at most {limit}")
        return lists

    def spec(self, where: str, spec: Any, formats: tuple[str, ...]) -> EdgeSpec:
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
        """A listed data file, relative to the folder or absolute, checked to exist."""
        path = Path(name) if os.path.isabs(name) else self.root / name
        if not path.exists():
            raise DataError(f"{path}: not found (listed in {self.meta_path} {where})")
        if not path.is_file():
            raise DataError(f"{path}: expected a regular file (listed in {self.meta_path} {where})")
        return path

    def edge_specs(self, etypes: list[str], counts: list[list[int]]) -> dict[str, EdgeSpec]:
        """Each edge type's files, one per chunk, their sizes checked against the counts."""
        edges = self.get("edges", dict)
        missing = [e for e in etypes if e not in edges]
        extra = sorted(set(edges) - set(etypes))
        if missing or extra:
            what = (f"no entry for edge type {missing[0]!r:.120}" if missing else
                    f"entry {extra[0]!r:.120} is not in edge_type")
            raise self.fail("edges", f"{what}; expected one entry per edge_type "
                                     f"{etypes!r:.200}")
        out = {}
        for etype, edge_counts in zip(etypes, counts):
            fmt, delimiter, files = self.spec(f"edges.{etype}", edges[etype], EDGE_FORMATS)
            if len(files) != len(edge_counts):
                raise self.fail(f"edges.{etype}.data", f"expected {len(edge_counts)} files "
                                                       f"(num_edges_per_chunk), got {len(files)}")
            for path, count in zip(files, edge_counts):
                rows = edge_file_rows(path, fmt)
                if rows is not None and rows != count:
                    raise DataError(f"{path}: holds {rows} edges, {self.meta_path} "
                                    f"num_edges_per_chunk says {count}")
                size = path.stat().st_size
                if rows is None and count * MIN_CSV_EDGE_BYTES > size + 1:  # last line: no \n
                    raise DataError(f"{path}: {size} bytes cannot hold the {count} edges "
                                    f"{self.meta_path} num_edges_per_chunk says")
            out[etype] = (fmt, delimiter, files)
        return out

    def node_data(self, totals: dict[str, int]) -> dict[str, dict[str, list[NodeFile]]]:
        """``node_data``'s files per node type and key (types without data: no keys)."""
        node_data = self.get("node_data", dict, default={})
        extra = sorted(set(node_data) - set(totals))
        if extra:
            raise self.fail("node_data", f"node types {extra!r:.200} are not in node_type "
                                         f"{list(totals)!r:.200}")
        return {t: self.get_keys(node_data.get(t, {}), t, n) for t, n in totals.items()}

    def get_keys(self, specs: Any, ntype: str, num_nodes: int) -> dict[str, list[NodeFile]]:
        """One node type's keys, each file's header read and the row total checked."""
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
            if sum(f.info.rows for f in files) != num_nodes:
                raise self.short_file(where, files, ntype, num_nodes)
            keys[key] = files
        return keys

    def short_file(self, where: str, files: list[NodeFile], ntype: str,
                   num_nodes: int) -> DataError:
        """The error for a key whose files do not hold ``num_nodes`` rows, naming the file: the
        one file off its chunk's count where the files follow the chunks, else the last one."""
        rows = [f.info.rows for f in files]
        chunks = self.counts("num_nodes_per_chunk", self.names("node_type"))[
            self.names("node_type").index(ntype)]
        off = [i for i, (r, c) in enumerate(zip(rows, chunks)) if r != c]
        if len(rows) == len(chunks) and len(off) == 1:
            i = off[0]
            return DataError(f"{files[i].path}: holds {rows[i]} rows, expected {chunks[i]} "
                             f"(chunk {i} of num_nodes_per_chunk; {self.meta_path} {where})")
        which = "its only file" if len(files) == 1 else f"the last of its {len(files)} files"
        each = " + ".join(map(str, rows[:8])) + (" + ..." if len(rows) > 8 else "")
        return DataError(f"{files[-1].path}: {which} ({self.meta_path} {where}): the files hold "
                         f"{sum(rows)} rows ({each}), expected {num_nodes} (the sum of "
                         f"num_nodes_per_chunk)")

    def graph(self, block_bytes: int) -> "ChunkedGraph":
        """The folder as a :class:`ChunkedGraph` (one node type, one edge type)."""
        for key in ("node_type", "edge_type"):
            names = self.names(key)
            if len(names) != 1:
                raise self.fail(key, f"the streamed reader takes one {key.replace('_', ' ')} "
                                     f"(a homogeneous graph), got {names!r:.200}; a folder of "
                                     f"several types loads in memory (partition.pipeline "
                                     f"in_memory)")
        (ntype,) = self.names("node_type")
        (canonical,) = self.edge_types([ntype])
        etype = ":".join(canonical)
        name = self.get("graph_name", str, default=self.root.name)
        num_nodes = sum(self.counts("num_nodes_per_chunk", [ntype])[0])
        edge_counts = self.counts("num_edges_per_chunk", [etype])[0]
        fmt, delimiter, files = self.edge_specs([etype], [edge_counts])[etype]
        keys = self.node_data({ntype: num_nodes})[ntype]
        self.get("edge_data", dict, default={})  # accepted, not used: partitions hold node data
        return ChunkedGraph(self.root, name, ntype, etype, num_nodes, edge_counts, fmt, delimiter,
                            files, keys, block_bytes)


def check_ids(path: Path, chunk: int, end: str, ids: np.ndarray, n: int, ntype: str = "") -> None:
    """Node ids of one edge chunk's ``end`` (src / dst) within ``[0, n)``; else one line."""
    if len(ids) and (ids.min() < 0 or ids.max() >= n):
        i = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
        kind = f"{ntype} node ids" if ntype else "node ids"
        raise DataError(f"{path}: edge {i} (chunk {chunk}): {end} {ids[i]} is out of range, "
                        f"expected {kind} in [0, {n})")


def _is_mask(name: str, dtype: np.dtype) -> bool:
    return name.endswith("_mask") and dtype.kind in "biu"


def node_blocks(key: str, files: list[NodeFile], block_bytes: int = BLOCK_BYTES
                ) -> Iterator[tuple[int, np.ndarray]]:
    """``(first node id, rows)`` blocks of one key's files, at most ``block_bytes`` each, copied
    out of the files (a memmap slice or a parquet batch); integer ``*_mask`` rows as bool."""
    info = files[0].info
    row_bytes = NodeKey(key, info.dtype, info.row_shape).row_bytes
    max_rows = max(1, block_bytes // max(1, row_bytes))
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


def read_node_data(key: str, files: list[NodeFile], num_nodes: int) -> np.ndarray:
    """One key's rows for all ``num_nodes`` nodes, in a dtype torch holds (unsigned -> int64)."""
    info = files[0].info
    dtype = np.dtype(bool) if _is_mask(key, info.dtype) else info.dtype
    values = np.empty((num_nodes, *info.row_shape), dtype=dtype)
    for start, rows in node_blocks(key, files):
        values[start:start + len(rows)] = rows
    if values.dtype.kind == "u" and values.dtype != np.uint8:  # torch lacks these types
        if values.size and values.max() > np.iinfo(np.int64).max:
            raise DataError(f"{files[0].path}: node data {key!r}: values beyond int64")
        values = values.astype(np.int64)
    return values


class ChunkedGraph:
    """A chunked graph folder seen through :class:`dsgraph.data.chunked.contract.GraphChunks`."""

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
        check_ids(path, chunk, "src", src, self.num_nodes)
        check_ids(path, chunk, "dst", dst, self.num_nodes)
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
        return node_blocks(key, self.node_files[key], self.block_bytes)

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
        for name, files in sorted(self.node_files.items()):
            g.ndata[name] = torch.from_numpy(read_node_data(name, files, self.num_nodes))
        return g
