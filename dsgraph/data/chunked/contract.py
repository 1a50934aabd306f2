"""The contract between a graph read in chunks and the large-graph partitioning path.

:class:`GraphChunks` is what streamed partitioning (:mod:`dsgraph.partition.streamed.assign`,
:mod:`dsgraph.partition.streamed.dispatch`) reads: node and edge counts, the edges as a sequence of
chunks in edge-id order, and each node-data key as a sequence of row blocks in node-id order.
A chunk is read when asked for and never cached, so a consumer's memory is bounded by the chunks
it holds at once. Two implementations: :class:`dsgraph.data.chunked.folder.ChunkedGraph` (a
folder in DGL's chunked graph format, on disk) and :class:`InMemoryChunks` (a DGLGraph already in memory,
used to compare the streamed path with the in-memory one, and to write any dataset in the
chunked format).

Node ids are global and homogeneous (``0 .. num_nodes-1``); edges ``(src[i], dst[i])`` of chunk
``c`` have edge ids ``edge_offsets[c] + i``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import dgl

# The node keys a training graph holds (every dataset's loader provides them).
GRAPH_KEYS = ("feat", "label", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True)
class NodeKey:
    """One node-data key: its name, dtype and the shape of one row (``()`` for a scalar)."""

    name: str
    dtype: np.dtype
    row_shape: tuple[int, ...]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.row_shape, dtype=np.int64)))


@runtime_checkable
class GraphChunks(Protocol):
    """A homogeneous graph whose edges and node data are read chunk by chunk."""

    num_nodes: int
    num_edges: int

    @property
    def num_edge_chunks(self) -> int:
        """How many edge chunks there are."""

    def edge_offsets(self) -> np.ndarray:
        """``(num_edge_chunks + 1,)`` int64: chunk ``c`` holds edge ids ``[off[c], off[c+1])``."""

    def read_edges(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ``chunk``'s ``(src, dst)``: int64 arrays, every id in ``[0, num_nodes)``."""

    def node_keys(self) -> list[NodeKey]:
        """Every node-data key (``feat``, ``label``, ``train_mask``, ...), known without reading
        the data."""

    def iter_node_data(self, key: str) -> Iterator[tuple[int, np.ndarray]]:
        """``(first node id, rows)`` blocks of ``key`` covering ``0 .. num_nodes-1`` in order;
        rows have the key's dtype and row shape (bool masks are ``bool``)."""


def iter_edges(graph: GraphChunks) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(first edge id, src, dst)`` for every edge chunk, in order."""
    offsets = graph.edge_offsets()
    for c in range(graph.num_edge_chunks):
        src, dst = graph.read_edges(c)
        yield int(offsets[c]), src, dst


def read_node_key(graph: GraphChunks, key: str) -> np.ndarray:
    """The whole of one node-data key (for small keys: masks, labels)."""
    spec = next((k for k in graph.node_keys() if k.name == key), None)
    if spec is None:
        raise KeyError(key)
    out = np.empty((graph.num_nodes, *spec.row_shape), dtype=spec.dtype)
    for start, rows in graph.iter_node_data(key):
        out[start:start + rows.shape[0]] = rows
    return out


class InMemoryChunks:
    """A DGLGraph seen through :class:`GraphChunks`, cut into chunks of ``chunk_rows``."""

    def __init__(self, g: "dgl.DGLGraph", chunk_rows: int = 1 << 20) -> None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.g = g
        self.chunk_rows = chunk_rows
        self.num_nodes = int(g.num_nodes())
        self.num_edges = int(g.num_edges())

    @property
    def num_edge_chunks(self) -> int:
        """Edge chunks of ``chunk_rows`` edges (at least one, possibly empty)."""
        return max(1, -(-self.num_edges // self.chunk_rows))

    def edge_offsets(self) -> np.ndarray:
        """Chunk boundaries in edge ids."""
        bounds = np.arange(self.num_edge_chunks + 1, dtype=np.int64) * self.chunk_rows
        return np.minimum(bounds, self.num_edges)

    def read_edges(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """Edges ``[chunk * chunk_rows, ...)`` as int64 numpy arrays."""
        lo, hi = self.edge_offsets()[chunk:chunk + 2]
        src, dst = self.g.find_edges(np.arange(lo, hi, dtype=np.int64))
        return src.numpy().astype(np.int64), dst.numpy().astype(np.int64)

    def node_keys(self) -> list[NodeKey]:
        """The graph's ndata keys, sorted by name."""
        out = []
        for name in sorted(self.g.ndata.keys()):
            value = self.g.ndata[name]
            out.append(NodeKey(name, value.numpy().dtype, tuple(value.shape[1:])))
        return out

    def iter_node_data(self, key: str) -> Iterator[tuple[int, np.ndarray]]:
        """Blocks of ``chunk_rows`` rows of ``ndata[key]``."""
        value = self.g.ndata[key]
        for lo in range(0, self.num_nodes, self.chunk_rows):
            yield lo, value[lo:lo + self.chunk_rows].numpy()
