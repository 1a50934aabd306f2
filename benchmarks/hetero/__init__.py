"""Benchmark ``hetero``: distributed RGCN on a heterogeneous graph, dsgraph vs stock DistDGL.

The graph is the generated papers / authors / fields / institutions graph
(``dataset.name: synthetic_hetero``, 4 relations and their reverses; papers are the target type,
fields and institutions are featureless and learn DistEmbedding rows). The stock rows run
``benchmarks.stock_dgl_rgcn_trainer`` (DGL's distributed RGCN example logic, no dsgraph code) on
DGL's own METIS partitioning, served by unpatched DistGraph servers; the dsgraph rows run
``python -m train``'s heterogeneous sampled trainer (configs/hetero.yaml) on dsgraph's
partitions. Same graph, RGCN size, fanouts, batch size, learning rates and epochs everywhere; a
fresh job per repeat, repeats round-robin over the rows.

Rows (``link``):
- ``local`` (one host), the accuracy questions: dsgraph RGCN on 1 partition (2 trainers) vs 2
  partitions (1 trainer each), the 2-partition RGCN with INT2 activations (every tensor saved
  for backward block-wise quantized to 2 bits), and GraphSAGE of the same width and depth trained by dsgraph on
  the graph's homogeneous projection (``dgl.to_homogeneous`` order, features zero-padded to one
  width plus a one-hot of the node type, labels and masks on papers only), 2 partitions.
- ``veth``: 2 emulated hosts (network namespaces on a veth pair, each with its own /dev/shm:
  :mod:`dsgraph.cluster.netns`), one partition and one trainer per host, stock and dsgraph.
- ``veth_throttled``: the same over a link throttled to 1 Gbit/s.
Rows needing namespaces are skipped, with the reason in the report, where they cannot be made.

Both systems evaluate once, after training, on the test papers' neighbourhoods sampled with the
training fanouts. Job memory (``job_memory_mb``) is the peak summed PSS of every process of a
job, as its supervisor measures it (:class:`benchmarks.jobs.SupervisedMemory`, shared memory
counted once). Samples/s = training
seeds per second summed over trainers, median over epochs 2.. of a run, then median over repeats
(with the spread of the repeats). ``--quick``: 4k papers, 2 epochs, 1 repeat.
"""
from __future__ import annotations

from pathlib import Path

from benchmarks.hetero.report import VIEW, render

__all__ = ["VIEW", "render", "run"]


def run(quick: bool) -> Path:
    """:func:`benchmarks.hetero.runner.run`, imported when called (it imports DGL), so the
    report and settings load without it."""
    from benchmarks.hetero.runner import run as run_rows
    return run_rows(quick)
