"""Per-format readers and writers of the files in a DGL chunked graph folder.

Edge files: ``csv`` (``src dst`` per line, no header), ``parquet`` (two integer columns, src then
dst) and ``numpy`` (an ``(E, 2)`` integer ``.npy``, dsgraph's extension). Node-data files:
``numpy`` (``.npy``, rows in node order) and ``parquet`` (as DGL's ``array_readwriter`` writes
it: one column per feature dimension, or one list column, with an optional ``shape`` schema
entry). Inspection reads headers and footers only, so a hostile file costs bounded memory; every
problem is one :class:`DataError` line naming the file.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dsgraph.errors import DataError

EDGE_FORMATS = ("csv", "parquet", "numpy")
NODE_FORMATS = ("numpy", "parquet")
SUFFIXES = {"csv": "csv", "parquet": "parquet", "numpy": "npy"}
NODE_KINDS = "biuf"  # bool, signed, unsigned, float: what a node-data file may hold
PARQUET_ROW_GROUP_BYTES = 16 << 20  # row groups we write: reading one takes ~5x this (pyarrow)
CSV_BLOCK_BYTES = 16 << 20  # text parsed at once when reading an edge CSV
_SAFE_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # node-data keys become file names


@dataclass(frozen=True)
class FileInfo:
    """What one node-data (or numpy edge) file holds, read from its header or footer."""

    rows: int
    dtype: np.dtype
    row_shape: tuple[int, ...]


def _error(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# ---------------------------------------------------------------- numpy


def npy_info(path: Path) -> FileInfo:
    """Shape and dtype from a ``.npy`` header, checked against the file's size (no data read)."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            offset = fh.tell()
    except (ValueError, OSError, SyntaxError, TypeError) as exc:
        raise _error(path, f"not a readable .npy file ({_first_line(exc)})") from None
    if dtype.hasobject or dtype.kind not in NODE_KINDS or dtype.fields is not None:
        raise _error(path, f"expected a numeric or bool array, got dtype {dtype}")
    if len(shape) == 0:
        raise _error(path, "expected an array with one row per node or edge, got a scalar")
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    size = path.stat().st_size - offset
    if size != need:
        raise _error(path, f"header says shape {tuple(shape)} of {dtype} ({need} bytes of data), "
                           f"the file holds {size} bytes of data")
    native = dtype.newbyteorder("=")  # rows are copied out in native order: torch reads no other
    return FileInfo(int(shape[0]), native, tuple(int(d) for d in shape[1:]))


def npy_blocks(path: Path, info: FileInfo, max_rows: int) -> Iterator[np.ndarray]:
    """Copies of at most ``max_rows`` rows of a ``.npy`` at a time, read through a memmap.

    The file is mapped afresh for each block and unmapped after the copy: mapped pages count in
    the process's RSS, and one mapping over a 5 GB feature file would end up holding all of it.
    """
    if npy_info(path) != info:  # the file changed since it was opened
        raise _error(path, "changed since the chunked graph was opened")
    for lo in range(0, info.rows, max_rows):
        mm = np.load(path, mmap_mode="r")
        # a C-ordered native copy: the caller never pins the file
        block = np.array(mm[lo:lo + max_rows], dtype=info.dtype, order="C")
        del mm
        yield block


# ---------------------------------------------------------------- parquet


@dataclass(frozen=True)
class ParquetLayout:
    """How a parquet node-data file's columns make rows."""

    info: FileInfo
    list_column: bool  # one list column per row (Spark's vectors) instead of a column per dim


@dataclass(frozen=True)
class NodeFile:
    """One file of a node-data key, as its header or footer describes it."""

    path: Path
    fmt: str
    info: FileInfo
    layout: ParquetLayout | None  # parquet only


def _open_parquet(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path, pre_buffer=False)  # pre-buffering holds more at once
    except (pa.ArrowException, OSError) as exc:
        raise _error(path, f"not a readable parquet file ({_first_line(exc)})") from None


def _numpy_type(path: Path, typ: pa.DataType) -> np.dtype:
    try:
        dtype = np.dtype(typ.to_pandas_dtype())
    except (NotImplementedError, TypeError):
        dtype = np.dtype(object)
    if dtype.kind not in NODE_KINDS:
        raise _error(path, f"expected numeric or bool columns, got {typ}")
    return dtype


def _shape_entry(path: Path, schema: pa.Schema) -> tuple[int, ...] | None:
    """DGL's ``shape`` schema entry (``str(array.shape)``), parsed without evaluating code."""
    raw = (schema.metadata or {}).get(b"shape")
    if raw is None:
        return None
    try:
        shape = ast.literal_eval(raw.decode()[:1000])
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        shape = None
    if not (isinstance(shape, tuple) and shape
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise _error(path, f"schema entry 'shape' must be a tuple of sizes, got {raw[:80]!r}")
    return shape


def parquet_layout(path: Path) -> ParquetLayout:
    """Rows, dtype and row shape of a parquet node-data file, from its footer."""
    try:
        return _parquet_layout(path, _open_parquet(path))
    except pa.ArrowException as exc:
        raise _error(path, f"unreadable ({_first_line(exc)})") from None


def _parquet_layout(path: Path, pf: pq.ParquetFile) -> ParquetLayout:
    schema = pf.schema_arrow
    rows = pf.metadata.num_rows
    types = list(schema.types)
    if not types:
        raise _error(path, "expected at least one column, got none")
    listed = len(types) == 1 and (pa.types.is_list(types[0]) or pa.types.is_large_list(types[0])
                                  or pa.types.is_fixed_size_list(types[0]))
    if listed:
        dtype = _numpy_type(path, types[0].value_type)
        if pa.types.is_fixed_size_list(types[0]):
            width = types[0].list_size
        elif rows == 0:
            width = 0
        else:  # a variable list: the first row's length (every row is checked when read)
            first = next(pf.iter_batches(batch_size=1)).column(0)
            width = first.value_lengths()[0].as_py() or 0
        cols = width
    else:
        dtypes = {_numpy_type(path, t) for t in types}
        if len(dtypes) != 1:
            raise _error(path, f"expected columns of one type, got {sorted(map(str, dtypes))}")
        dtype, cols = dtypes.pop(), len(types)
    shape = _shape_entry(path, schema)
    if shape is None:
        row_shape: tuple[int, ...] = () if cols == 1 and not listed else (cols,)
    else:
        if shape[0] != rows or int(np.prod(shape[1:], dtype=object)) != cols:
            raise _error(path, f"schema entry 'shape' says {shape}, the file holds {rows} rows "
                               f"of {cols} values")
        row_shape = tuple(shape[1:])
    return ParquetLayout(FileInfo(rows, dtype, row_shape), listed)


def _batch_array(path: Path, batch: pa.RecordBatch, layout: ParquetLayout) -> np.ndarray:
    """One record batch as an array of ``(rows, *row_shape)``."""
    info, n = layout.info, batch.num_rows
    if any(col.null_count for col in batch.columns):
        raise _error(path, "holds null values; expected a value in every cell")
    if layout.list_column:
        col = batch.column(0)
        width = int(np.prod(info.row_shape, dtype=np.int64))
        ragged = isinstance(col, (pa.ListArray, pa.LargeListArray)) and n and \
            np.any(np.diff(col.offsets.to_numpy()) != width)
        if len(col.flatten()) != n * width or ragged:
            raise _error(path, f"expected lists of {width} values in every row")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        return np.array(flat, dtype=info.dtype).reshape((n, *info.row_shape))  # own the rows
    out = np.empty((n, batch.num_columns), dtype=info.dtype)
    for j, col in enumerate(batch.columns):
        out[:, j] = col.to_numpy(zero_copy_only=False)
    return out.reshape((n, *info.row_shape))


def parquet_blocks(path: Path, layout: ParquetLayout, max_rows: int) -> Iterator[np.ndarray]:
    """Blocks of at most ``max_rows`` rows (memory besides: pyarrow's buffers for one row group,
    measured at ~5x its size)."""
    if parquet_layout(path) != layout:
        raise _error(path, "changed since the chunked graph was opened")
    try:
        for batch in _open_parquet(path).iter_batches(batch_size=max_rows):
            yield _batch_array(path, batch, layout)
    except pa.ArrowException as exc:
        raise _error(path, f"unreadable ({_first_line(exc)})") from None


def write_parquet_array(path: Path, arr: np.ndarray) -> None:
    """An array as DGL writes it: a column per dimension (``"0"``, ``"1"``, ...) and ``shape``."""
    flat = arr.reshape(arr.shape[0], -1) if arr.ndim != 1 else arr[:, None]
    group_rows = max(1, PARQUET_ROW_GROUP_BYTES // max(1, flat[:1].nbytes))
    cols = [pa.array(np.ascontiguousarray(flat[:, j])) for j in range(flat.shape[1])]
    table = pa.Table.from_arrays(cols, names=[str(j) for j in range(flat.shape[1])])
    table = table.replace_schema_metadata({"shape": str(tuple(arr.shape))})
    pq.write_table(table, path, row_group_size=group_rows)


# ---------------------------------------------------------------- edges


def edge_file_rows(path: Path, fmt: str) -> int | None:
    """Edges a file holds, where its header or footer says so (``None`` for CSV)."""
    if fmt == "numpy":
        info = npy_info(path)
        if info.row_shape != (2,) or info.dtype.kind not in "iu":
            shape = ", ".join(map(str, (info.rows, *info.row_shape)))
            raise _error(path, f"expected an (E, 2) integer array, got ({shape}) of {info.dtype}")
        return info.rows
    if fmt == "parquet":
        return _open_parquet(path).metadata.num_rows
    return None


def read_edge_file(path: Path, fmt: str, delimiter: str, expected: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64 of one edge file holding ``expected`` edges (else a DataError).

    Memory: the two int64 arrays (16 bytes an edge) plus one block being parsed (a CSV block of
    ``CSV_BLOCK_BYTES`` text, one parquet row group, or one memmap slice).
    """
    src, dst, got = np.empty(expected, np.int64), np.empty(expected, np.int64), 0
    for s, d in _edge_blocks(path, fmt, delimiter):
        if got + len(s) > expected:
            raise _error(path, f"expected {expected} edges (num_edges_per_chunk), "
                               f"the file holds more")
        src[got:got + len(s)], dst[got:got + len(s)] = s, d
        got += len(s)
    if got != expected:
        raise _error(path, f"expected {expected} edges (num_edges_per_chunk), got {got}")
    return src, dst


def _edge_blocks(path: Path, fmt: str, delimiter: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    if fmt == "numpy":
        edge_file_rows(path, fmt)  # refuses anything but an (E, 2) integer array
        for block in npy_blocks(path, npy_info(path), 1 << 22):
            yield block[:, 0], block[:, 1]
    elif fmt == "parquet":
        yield from _parquet_edge_blocks(path)
    else:
        yield from _csv_edge_blocks(path, delimiter)


def _parquet_edge_blocks(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    pf = _open_parquet(path)
    types = list(pf.schema_arrow.types)
    if len(types) != 2 or not all(pa.types.is_integer(t) for t in types):
        raise _error(path, f"expected two integer columns (src, dst), got {list(map(str, types))}")
    try:
        for batch in pf.iter_batches(batch_size=1 << 22):
            if batch.column(0).null_count or batch.column(1).null_count:
                raise _error(path, "holds null values; expected a node id in every cell")
            yield batch.column(0).to_numpy(), batch.column(1).to_numpy()
    except pa.ArrowException as exc:
        raise _error(path, f"unreadable ({_first_line(exc)})") from None


def _csv_edge_blocks(path: Path, delimiter: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    read = pacsv.ReadOptions(autogenerate_column_names=True, block_size=CSV_BLOCK_BYTES)
    parse = pacsv.ParseOptions(delimiter=delimiter)
    convert = pacsv.ConvertOptions(column_types={"f0": pa.int64(), "f1": pa.int64()})
    try:
        if path.stat().st_size == 0:  # pyarrow refuses an empty file; it holds no edges
            return
        reader = pacsv.open_csv(path, read_options=read, parse_options=parse,
                                convert_options=convert)
        if len(reader.schema) != 2:
            raise _error(path, f"expected 2 columns (src{delimiter}dst), got {len(reader.schema)}")
        for batch in reader:
            if batch.column(0).null_count or batch.column(1).null_count:
                raise _error(path, "has an empty src or dst field; expected a node id")
            yield batch.column(0).to_numpy(), batch.column(1).to_numpy()
    except OSError as exc:
        raise _error(path, f"cannot read it ({exc.strerror or exc})") from None
    except pa.ArrowException as exc:
        raise _error(path, f"expected integer node ids 'src{delimiter}dst' per line: "
                           f"{_first_line(exc)}") from None


def write_edge_file(path: Path, src: np.ndarray, dst: np.ndarray, fmt: str) -> None:
    """One edge chunk in ``fmt`` (csv with a space delimiter, as DGL's chunk_graph writes)."""
    if fmt == "numpy":
        np.save(path, np.stack([src, dst], axis=1).astype(np.int64, copy=False))
        return
    table = pa.Table.from_arrays([pa.array(src), pa.array(dst)], names=["0", "1"])
    if fmt == "parquet":
        table = table.replace_schema_metadata({"shape": str((len(src), 2))})
        pq.write_table(table, path, row_group_size=PARQUET_ROW_GROUP_BYTES // 16)
    else:
        pacsv.write_csv(table, path, pacsv.WriteOptions(include_header=False, delimiter=" "))


# ---------------------------------------------------------------- streaming a folder


def write_node_blocks(tmp: Path, num_nodes: int, blocks: Iterable[dict[str, np.ndarray]],
                      fmt: str) -> tuple[list[int], dict]:
    """Write node blocks' keys to ``node_data/<key>-<i>.<ext>`` under ``tmp``, each block checked
    against the first; returns ``num_nodes_per_chunk`` and the ``node_data`` entry of one type."""
    counts: list[int] = []
    kinds: dict[str, tuple] = {}  # key -> (dtype, row shape) of the first block
    files: dict[str, list[str]] = {}
    for i, block in enumerate(blocks):
        arrays = {k: np.asarray(v) for k, v in dict(block).items()}
        if i == 0:
            if not arrays or not all(_SAFE_KEY.fullmatch(str(k)) for k in arrays):
                raise DataError(f"node block 0: expected keys of letters, digits, '_', '-', '.', "
                                f"got {sorted(map(str, arrays)) if arrays else 'none'}")
            kinds = {k: (v.dtype, v.shape[1:]) for k, v in arrays.items()}
            files = {k: [] for k in arrays}
        if set(arrays) != set(kinds):
            raise DataError(f"node block {i}: keys {sorted(arrays)}, expected {sorted(kinds)} "
                            f"as in block 0")
        rows = {len(v) if v.ndim else -1 for v in arrays.values()}
        if len(rows) != 1 or -1 in rows:
            raise DataError(f"node block {i}: its keys have different row counts {sorted(rows)}")
        n = rows.pop()
        for k, v in arrays.items():
            if (v.dtype, v.shape[1:]) != kinds[k] or v.dtype.kind not in NODE_KINDS:
                raise DataError(f"node block {i}: key {k!r}: rows {v.dtype}{list(v.shape[1:])}, "
                                f"expected numeric {kinds[k][0]}{list(kinds[k][1])} as in block 0")
        if sum(counts) + n > num_nodes:
            raise DataError(f"node block {i}: ends at node {sum(counts) + n}, beyond num_nodes "
                            f"{num_nodes}")
        for k, v in arrays.items():
            files[k].append(f"node_data/{k}-{i}.{SUFFIXES[fmt]}")
            if fmt == "numpy":
                np.save(tmp / files[k][-1], v)
            else:
                write_parquet_array(tmp / files[k][-1], v)
        counts.append(n)
    if sum(counts) != num_nodes and kinds:
        raise DataError(f"node blocks: cover {sum(counts)} nodes, expected num_nodes {num_nodes}")
    meta = {k: {"format": {"name": fmt}, "data": names} for k, names in files.items()}
    return (counts if kinds else [num_nodes]), meta


def fixed_sizes(total: int, rows: int) -> list[int]:
    """Chunks of ``rows``, the last one shorter (at least one chunk)."""
    return [min(rows, total - lo) for lo in range(0, total, rows)] or [0]


def even_sizes(total: int, parts: int) -> list[int]:
    """``parts`` sizes summing to ``total``, the first ``total % parts`` one larger."""
    parts = max(1, parts)
    return [total // parts + (i < total % parts) for i in range(parts)]


def rechunk(blocks: Iterable[tuple[np.ndarray, ...]], sizes: list[int],
            empty: tuple[np.ndarray, ...]) -> Iterator[tuple[np.ndarray, ...]]:
    """Blocks of parallel arrays re-cut to ``sizes`` rows (memory: one output chunk and one
    input block)."""
    it = iter(blocks)
    pending, have = [empty], 0
    for size in sizes:
        while have < size:
            block = next(it, None)
            if block is None:
                raise DataError(f"the source graph ended {size - have} rows before its stated size")
            pending.append(block)
            have += len(block[0])
        joined = tuple(np.concatenate([p[j] for p in pending]) for j in range(len(empty)))
        yield tuple(a[:size] for a in joined)
        pending, have = [tuple(a[size:].copy() for a in joined)], have - size
