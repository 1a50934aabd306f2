"""Benchmark ``scale``: dsgraph's sampled trainer vs stock DistDGL as the graph grows, at equal
job memory.

Graphs: the synthetic generator (``dataset.name: synthetic``) at 250k, 1M and 2M nodes
(``--datasets 250k``: one size, the others' rows carried from the saved report), 256 features,
average degree 10; ~60k training nodes (an epoch is ~30 batches of 1024 per trainer on 2 hosts),
2k validation and 8k test nodes. Both systems evaluate once, after training, on sampled
neighbourhoods with the training fanouts: dsgraph ``sampled.eval: sampled`` (validation and test
nodes), stock ``benchmarks.stock_dgl_trainer --eval sampled`` (test nodes) — not layer-wise over
every node, which at these sizes would dwarf the training being compared. Each size is
partitioned once per run by both systems (dsgraph's ``partition_graph``, DGL's own METIS
``partition_graph`` for stock) into a temporary folder.

Deployments: 2 emulated hosts (:mod:`dsgraph.cluster.netns`, one partition, one server and one
trainer per host, each host with its own /dev/shm) on a ``veth`` link and on one throttled to
1 Gbit/s (``veth_throttled``); at 1M also 4 hosts on a bridge (``veth``). Rows per deployment:

- ``stock``: DGL's distributed GraphSAGE example logic, unpatched servers.
- ``graphstorm`` (2 hosts over veth, where GraphStorm's venv exists: ``make graphstorm-venv``):
  GraphStorm 0.4.0's built-in node classification (its SAGE encoder, whose aggregator is
  ``pool``, after an input projection) with its own trainer and loaders, on stock's partitions
  and unpatched servers (``benchmarks.graphstorm_trainer``).
- ``no_cache``: dsgraph with ``sampled.feature_memory_mb=0`` (every remote row over RPC); the
  probe that sizes the next row, reported too.
- ``equal_memory``: dsgraph with a feature cache of
  ``max(0, (1.04 x stock job MiB - no_cache job MiB) / trainers)`` MiB per trainer, from this
  run's medians: the job's memory is meant to stay within 1.05x stock's.
- ``defaults``: dsgraph's defaults (a quarter of the trainer's share of its partition's feature
  bytes, 8-bit rows).

And once per size the ``limit`` row (``system: dgl``, ``link: local``): plain DGL with the whole
graph in memory in each of one process per core, no servers (``benchmarks.limit_trainer``, DGL's
own layers), the ceiling a distributed job on the same cores reaches only by doing less work;
every row's ``ratio_vs_limit`` is its throughput over it.

Job memory is the peak summed PSS of every process of a job, as its supervisor measures it
(:class:`benchmarks.jobs.SupervisedMemory`, stock and dsgraph alike: shared memory counted once); ``peak_rss_mb`` is the
largest process's peak RSS, ``planned_peak_mb`` dsgraph's memory plan's largest process.
Samples/s = training seeds per second summed over trainers, median over epochs 2.., then over
repeats (default 2, with min/max). Every dsgraph, stock and limit job times its phases
(``train.profile`` / ``--phases``, :mod:`dsgraph.phases`): breakdown records (``phase``,
``cpu_s_per_1k_seeds``) and a table per size. Stock, no_cache and defaults run first, repeats round-robin
over them (the limit once per repeat); then equal_memory, whose budget needs their medians. The
report states per size and deployment whether dsgraph met its targets (equal_memory >= 1.5x
stock's throughput on veth, 2x throttled, 1.3x on 4 hosts, memory <= 1.05x, >= 1.0x the limit's
throughput; defaults memory <= 1.1x; test accuracy within 0.005).
``--quick``: 20k nodes (2 and 4 hosts), 1 repeat, 2 epochs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from benchmarks.scale.report import VIEW, render

__all__ = ["VIEW", "render", "run"]


def run(quick: bool, datasets: Optional[list[str]] = None) -> Path:
    """:func:`benchmarks.scale.runner.run`, imported when called (it imports DGL), so the
    report and settings load without it."""
    from benchmarks.scale.runner import run as run_sizes
    return run_sizes(quick, datasets)
