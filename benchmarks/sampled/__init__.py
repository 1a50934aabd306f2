"""Benchmark ``sampled``: dsgraph's sampled trainer vs stock DistDGL on equal deployments.

The stock rows run ``benchmarks.stock_dgl_trainer`` (DGL's distributed GraphSAGE example logic,
no dsgraph code) on DGL's own partitioning, served by unpatched DistGraph servers; the dsgraph
rows run ``python -m train``'s sampled trainer on dsgraph's partitions. Same graph, model,
fanouts, batch size, learning rate and epochs everywhere; a fresh job per repeat.

Deployments (``link``):
- ``local``: one host. Stock DGL can only serve one partition per host (dmlc/dgl#3621), so its
  row is 1 partition x 2 trainers; dsgraph runs 2 partitions x 1 trainer (the target), and also
  stock's layout.
- ``veth``: 2 emulated hosts (network namespaces on a veth pair, each with its own /dev/shm:
  :mod:`dsgraph.cluster.netns`), one partition and one trainer per host, both systems.
- ``veth_throttled``: the same over a link throttled to 1 Gbit/s (``tc`` token bucket).
Rows needing namespaces are skipped, with the reason in the report, where they cannot be made.

dsgraph rows: its defaults (a feature cache of remote rows, 8-bit, a quarter of the trainer's
share of its partition's feature bytes; DGL's distributed sampler), the tuned ``local sampling``
(2-hop halo partitions, own seeds, every layer sampled in the trainer), and single options turned
off or on (``no feature cache``: ``sampled.feature_memory_mb=0``, every remote row over RPC;
``prefetch 2``; on veth ``all remote rows cached`` exact, 8-bit and 4-bit: a 64 MiB budget
that holds every remote row in each encoding, so every remote read goes through the codec).

The ``limit`` row (``system: dgl``) is the ceiling a distributed job on the same cores reaches
only by doing less work: plain DGL with the whole graph in memory in each of two processes (one
per core), no servers (``benchmarks.limit_trainer``; it scores the test nodes on sampled
neighbourhoods); every row's ``ratio_vs_limit`` is its throughput over the limit's.

Job memory (``job_memory_mb``) is the peak summed PSS of every process of a job
(:class:`benchmarks.jobs.SupervisedMemory`: the supervisor's figure, shared memory counted
once), measured the same way for stock and dsgraph rows.

Samples/s = training seeds per second summed over trainers (seeds / slowest trainer's loop),
median over epochs 2.. of a run, then median over repeats (with the spread of the repeats).
"""
from benchmarks.sampled.report import VIEW, render
from benchmarks.sampled.runner import run

__all__ = ["VIEW", "render", "run"]
