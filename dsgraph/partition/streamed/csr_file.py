"""Symmetric, deduplicated CSR adjacency built out of core into ``.npy`` memmaps.

Two passes over a source of ``(rows, cols[, weights])`` entry blocks: a count pass (row
lengths, an ``int64`` array of ``n``) and a fill pass that scatters every entry to its row's
slot in an ``indices`` memmap; then each row block is sorted and deduplicated in place
(duplicate weights summed). Memory grows with the number of rows, not of entries: entries stay
in the memmaps, which the page cache holds or writes out. Indices are ``int32`` while ``n`` and
the entry count are below ``2**31``, so scipy keeps the memmaps instead of upcasting to int64.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import scipy.sparse as sp

from dsgraph.data.chunked.contract import GraphChunks
from dsgraph.errors import DataError

# Entries sorted at once while deduplicating (int64 keys: ~32 MiB a block, plus the sort's copy).
BLOCK_ENTRIES = 1 << 21

Entries = Callable[[], Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]]


@dataclass
class CsrFile:
    """A CSR whose ``indices`` (and ``weights``) live in ``.npy`` files under a work folder.

    Blocks are read with ``np.fromfile`` rather than through a lasting memmap: pages of a mapped
    file count in the process's RSS for as long as the mapping lives, page cache does not.
    """

    indptr: np.ndarray
    indices_path: Path
    weights_path: Path | None = None

    @property
    def num_rows(self) -> int:
        """Rows (nodes)."""
        return int(self.indptr.shape[0] - 1)

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return int(self.indptr[-1])

    def degrees(self) -> np.ndarray:
        """Entries per row, int64."""
        return np.diff(self.indptr).astype(np.int64)

    def read(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Entries ``[a, b)``: their columns and (for a weighted CSR) weights."""
        return _read(self.indices_path, a, b), (
            None if self.weights_path is None else _read(self.weights_path, a, b))

    def mapped(self) -> np.ndarray:
        """The whole ``indices`` file as a read-only memmap of ``nnz`` items."""
        return np.load(self.indices_path, mmap_mode="r")[:self.nnz]

    def to_scipy(self) -> sp.csr_matrix:
        """A scipy CSR over a memmap of the indices (drop it to unmap; data is stride-0)."""
        n = self.num_rows
        data = np.broadcast_to(np.int8(1), (self.nnz,))
        return sp.csr_matrix((data, self.mapped(), self.indptr), shape=(n, n), copy=False)

    def row_blocks(self, block_entries: int = BLOCK_ENTRIES) -> Iterator[tuple[int, int]]:
        """``(first row, end row)`` ranges holding about ``block_entries`` entries each."""
        yield from row_ranges(self.indptr, block_entries)


def _read(path: Path, a: int, b: int) -> np.ndarray:
    """Items ``[a, b)`` of a 1-d ``.npy`` file, read (not mapped) into memory."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                  else np.lib.format.read_array_header_2_0)
        _, _, dtype = header(fh)
        fh.seek(fh.tell() + a * dtype.itemsize)
        return np.fromfile(fh, dtype=dtype, count=b - a)


def row_ranges(indptr: np.ndarray, block_entries: int) -> Iterator[tuple[int, int]]:
    """Row ranges of about ``block_entries`` entries (at least one row each)."""
    n = indptr.shape[0] - 1
    r = 0
    while r < n:
        end = int(np.searchsorted(indptr, indptr[r] + block_entries, side="right")) - 1
        end = min(max(end, r + 1), n)
        yield r, end
        r = end


def index_dtype(n: int, nnz: int) -> np.dtype:
    """int32 while every id and offset fits, else int64."""
    return np.dtype(np.int32) if max(n, nnz) < 2 ** 31 - 1 else np.dtype(np.int64)


def graph_entries(graph: GraphChunks, log: Callable[..., None] | None = None) -> Entries:
    """Entry source of the symmetrized input: both directions of every non-loop edge."""

    def entries() -> Iterator[tuple[np.ndarray, np.ndarray, None]]:
        total = graph.num_edge_chunks
        for c in range(total):
            src, dst = graph.read_edges(c)
            for ends, name in ((src, "src"), (dst, "dst")):
                if ends.size and (int(ends.min()) < 0 or int(ends.max()) >= graph.num_nodes):
                    raise DataError(f"edge chunk {c}: {name} ids must lie in [0, "
                                    f"{graph.num_nodes}), got {int(ends.min())}.."
                                    f"{int(ends.max())}")
            keep = src != dst
            s, d = src[keep], dst[keep]
            if log is not None:
                log(f"edge chunk {c + 1}/{total}")
            yield np.concatenate([s, d]), np.concatenate([d, s]), None

    return entries


def build_csr(num_rows: int, entries: Entries, work_dir: Path, name: str,
              weighted: bool = False, log: Callable[..., None] | None = None) -> CsrFile:
    """Count, fill and deduplicate ``entries()`` into ``work_dir/<name>.*.npy`` files."""
    counts = np.zeros(num_rows, dtype=np.int64)
    for rows, _, _ in entries():
        counts += np.bincount(rows, minlength=num_rows)
    total = int(counts.sum())
    idx_t = index_dtype(num_rows, total)
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    ipath = work_dir / f"{name}.indices.npy"
    wpath = work_dir / f"{name}.weights.npy" if weighted else None
    indices = new_npy(ipath, max(total, 1), idx_t)
    weights = None if wpath is None else new_npy(wpath, max(total, 1), idx_t)
    cursor = indptr[:-1].copy()
    for rows, cols, w in entries():
        order = np.argsort(rows, kind="stable")
        r = rows[order]
        starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if r.size else np.zeros(0, np.int64)
        run = np.diff(np.r_[starts, r.size])
        pos = cursor[r] + (np.arange(r.size) - np.repeat(starts, run))
        indices[pos] = cols[order]
        if weights is not None:
            weights[pos] = 1 if w is None else w[order]
        cursor[r[starts]] += run
    del cursor
    indices.flush()
    del indices  # unmap: the dedup pass reads and writes the file block by block
    if weights is not None:
        weights.flush()
        del weights
    if log is not None:
        log(f"{name}: {total:,} entries filled, deduplicating", True)
    return _dedup(indptr, ipath, wpath, idx_t, log)


def new_npy(path: Path, size: int, dtype: np.dtype) -> np.memmap:
    """A new ``.npy`` memmap of ``size`` items (replacing any earlier file of that name)."""
    if path.exists():
        os.unlink(path)
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(size,))


def _data_offset(path: Path) -> int:
    """Byte offset of a ``.npy`` file's data."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        (np.lib.format.read_array_header_1_0 if version == (1, 0)
         else np.lib.format.read_array_header_2_0)(fh)
        return fh.tell()


def write_at(path: Path, start: int, values: np.ndarray) -> None:
    """Overwrite items ``[start, start + len(values))`` of a 1-d ``.npy`` file."""
    with open(path, "r+b") as fh:
        fh.seek(_data_offset(path) + start * values.dtype.itemsize)
        values.tofile(fh)


def _dedup(indptr: np.ndarray, ipath: Path, wpath: Path | None, idx_t: np.dtype,
           log: Callable[..., None] | None) -> CsrFile:
    """Sort and deduplicate each row in place, block by block; duplicate weights are summed."""
    n = indptr.shape[0] - 1
    new_ptr = np.zeros(n + 1, dtype=np.int64)
    out = 0
    for r0, r1 in row_ranges(indptr, BLOCK_ENTRIES):
        a, b = int(indptr[r0]), int(indptr[r1])
        local = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(indptr[r0:r1 + 1]))
        key = local * n + _read(ipath, a, b).astype(np.int64)
        if wpath is None:
            uniq = np.unique(key)
        else:
            uniq, inv = np.unique(key, return_inverse=True)
            w = np.bincount(inv, weights=_read(wpath, a, b), minlength=uniq.size)
            write_at(wpath, out, w.astype(idx_t))
        rows, cols = np.divmod(uniq, n)
        # out <= a: the block was read above, so writing in place never overwrites unread data
        write_at(ipath, out, cols.astype(idx_t))
        new_ptr[r0 + 1:r1 + 1] = np.bincount(rows, minlength=r1 - r0)
        out += uniq.size
        if log is not None:
            log(f"{ipath.name}: rows deduplicated up to {r1:,} of {n:,}")
    np.cumsum(new_ptr, out=new_ptr)
    ptr = new_ptr.astype(idx_t) if idx_t == np.int32 else new_ptr
    return CsrFile(ptr, ipath, wpath)
