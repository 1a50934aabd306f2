"""DGL's tensor-dict file (``dgl.data.utils.save_tensors``), written in place, row block by block.

``save_tensors`` needs every tensor in memory; a part's ``node_feat.dgl`` of a large graph is
too big for that. The layout (``src/graph/serialize/tensor_serialize.cc`` and ``NDArray::Save``
of DGL, little-endian): u64 magic ``0xDD5A9FBE3FA2443F``, u64 count, u64 count again (the
vector's length), then per tensor: u64 name length, name bytes, u64 ``0xDD5E40F096B4A13F``, u64
0, i32 device type (1 = CPU), i32 device id, i32 ndim, u8 dtype code, u8 bits, u16 lanes,
i64[ndim] shape, i64 data bytes, the data in C order. The order of the tensors is the iteration
order of DGL's C++ string map, so it is taken from a tiny file written by ``save_tensors``
itself with the same names (:func:`probe_layout`), as is each dtype's code.
"""
from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

_DICT_MAGIC = 0xDD5A9FBE3FA2443F
_ARRAY_MAGIC = 0xDD5E40F096B4A13F


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor's data lies in the file and how it is typed."""

    name: str
    dtype: str  # numpy dtype string
    shape: tuple[int, ...]
    offset: int  # byte offset of the data

    @property
    def nbytes(self) -> int:
        """Bytes of the data."""
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))


@dataclass(frozen=True)
class TensorHeader:
    """One tensor's header in a tensor-dict file: its name, dtype bytes (code, bits, lanes),
    shape, and where its data lies."""

    name: str
    dtype_bytes: bytes
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def value_bytes(self) -> int:
        """Bytes of one value (from the dtype's bits)."""
        return max(self.dtype_bytes[1] // 8, 1)


def read_headers(fh: BinaryIO) -> Iterator[TensorHeader]:
    """The headers of a tensor-dict file open at its start, in file order; each tensor's data
    is skipped (seeked over), never read."""
    _magic, count, _ = struct.unpack("<QQQ", fh.read(24))
    for _ in range(count):
        (length,) = struct.unpack("<Q", fh.read(8))
        name = fh.read(length).decode()
        fh.seek(16 + 8, os.SEEK_CUR)  # array magic and reserved, device type and id
        (ndim,) = struct.unpack("<i", fh.read(4))
        dtype_bytes = fh.read(4)
        shape = struct.unpack(f"<{ndim}q", fh.read(8 * ndim)) if ndim else ()
        (nbytes,) = struct.unpack("<q", fh.read(8))
        offset = fh.tell()
        fh.seek(nbytes, os.SEEK_CUR)
        yield TensorHeader(name, dtype_bytes, tuple(shape), offset, nbytes)


def probe_layout(tensors: dict[str, tuple[np.dtype, tuple[int, ...]]], probe_path: Path
                 ) -> list[tuple[str, bytes]]:
    """``[(name, dtype bytes)]`` in the order ``save_tensors`` writes ``tensors`` (name ->
    (dtype, row shape)), learned from a one-row file it writes at ``probe_path``."""
    import torch
    from dgl.data.utils import save_tensors

    dummy = {name: torch.from_numpy(np.zeros((1, *shape), dtype=dtype))
             for name, (dtype, shape) in tensors.items()}
    save_tensors(str(probe_path), dummy)
    data = probe_path.read_bytes()
    probe_path.unlink()
    return [(h.name, h.dtype_bytes) for h in read_headers(io.BytesIO(data))]


def create_tensor_file(path: Path, order: list[tuple[str, bytes]],
                       tensors: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> list[TensorSlot]:
    """Write the headers of a tensor-dict file of full shapes ``tensors`` (name -> (dtype,
    shape)) in ``order`` (:func:`probe_layout`) into a file of its final size (data zero);
    return each tensor's slot, for :func:`open_slot`."""
    slots, chunks, off = [], [], 0
    head = struct.pack("<QQQ", _DICT_MAGIC, len(order), len(order))
    chunks.append(head)
    off += len(head)
    for name, dtype_bytes in order:
        dtype, shape = tensors[name]
        raw = name.encode()
        slot_head = (struct.pack("<Q", len(raw)) + raw + struct.pack("<QQii", _ARRAY_MAGIC, 0, 1, 0)
                     + struct.pack("<i", len(shape)) + dtype_bytes
                     + struct.pack(f"<{len(shape)}q", *shape))
        nbytes = int(np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64)))
        slot_head += struct.pack("<q", nbytes)
        off += len(slot_head)
        slots.append(TensorSlot(name, np.dtype(dtype).str, tuple(shape), off))
        chunks.append((slot_head, off, nbytes))
        off += nbytes
    with open(path, "wb") as fh:
        fh.write(head)
        for slot_head, data_off, nbytes in chunks[1:]:
            fh.seek(data_off - len(slot_head))
            fh.write(slot_head)
        fh.truncate(off)  # the data stays sparse zeros until written
    return slots


def open_slot(path: Path, slot: TensorSlot) -> np.memmap | np.ndarray:
    """A writable view of one tensor's data (an empty array for an empty tensor)."""
    if slot.nbytes == 0:
        return np.empty(slot.shape, dtype=slot.dtype)
    return np.memmap(path, dtype=slot.dtype, mode="r+", offset=slot.offset, shape=slot.shape)


def write_rows(path: Path, slot: TensorSlot, first_row: int, rows: np.ndarray) -> None:
    """Write ``rows`` (contiguous, in order) at row ``first_row`` of a tensor, without mapping."""
    row_bytes = slot.nbytes // max(slot.shape[0], 1) if slot.shape else slot.nbytes
    data = np.ascontiguousarray(rows, dtype=slot.dtype)
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data.reshape(-1).view(np.uint8))
        at = slot.offset + first_row * row_bytes
        while view.nbytes:  # pwrite may write less than asked
            done = os.pwrite(fd, view, at)
            view, at = view[done:], at + done
    finally:
        os.close(fd)
