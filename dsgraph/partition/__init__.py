"""Graph partitioning: the in-memory path (node assignment ``assign``, the writers ``format``
and, for heterographs, ``hetero_format``, driven by ``build``), the streamed pipeline for graphs
read in chunks (the ``streamed`` package: its own assignment and dispatch, same files), and what
both share: reading the files back (``reader``), their integrity block (``meta``, ``integrity``)
and DGL's tensor-file layout (``ndarray_file``)."""
from __future__ import annotations

from dsgraph.lazy import lazy_exports

# Each public name -> the submodule defining it, imported on first use (PEP 562): the integrity
# checks need neither torch nor DGL, so `python -m partition --if-missing` verifies existing
# files in a fraction of a second instead of first spending seconds loading DGL.
_EXPORTS = {
    "balance_weights": "assign", "metis_assignment": "assign", "metis_parts": "assign",
    "random_assignment": "assign",
    "rebalance": "assign", "symmetric_csr": "assign",
    "partition_graph": "build", "partition_hetero_graph": "build",
    "partition_streamed": "streamed.pipeline",
    "assign_streamed": "streamed.assign", "dispatch_partitions": "streamed.dispatch",
    "partition_stats": "format", "split_one_hop": "format", "write_partitions": "format",
    "homogeneous_projection": "hetero_format", "write_hetero_partitions": "hetero_format",
    "partition_fingerprint": "integrity", "verify_partitions": "integrity",
    "partition_source": "meta", "read_meta": "meta",
    "LocalPartition": "reader", "load_local_partition": "reader", "orig_ids": "reader",
    "orig_ids_per_type": "reader",
    "partition_json": "reader",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
