"""Graph partitioning: node assignment (``assign``), partition files (``format``, ``reader``)."""
from __future__ import annotations

from dsgraph.partition.assign import (
                                      balance_weights,
                                      metis_assignment,
                                      random_assignment,
                                      rebalance,
                                      symmetric_csr,
)
from dsgraph.partition.build import partition_graph
from dsgraph.partition.format import partition_stats, split_one_hop, write_partitions
from dsgraph.partition.reader import (
                                      LocalPartition,
                                      load_local_partition,
                                      orig_ids,
                                      partition_json,
)

__all__ = ["LocalPartition", "balance_weights", "load_local_partition", "metis_assignment", "orig_ids",
           "partition_graph", "partition_json", "partition_stats", "random_assignment", "rebalance", "split_one_hop",
           "symmetric_csr", "write_partitions"]
