"""Benchmark ``tasks``: link prediction against stock DistDGL, and what each task's options cost.

Link prediction (configs/link_prediction.yaml): dsgraph's sampled trainer against
``benchmarks.stock_dgl_link_trainer`` (DGL's distributed link-prediction example logic, no
dsgraph code, on DGL's own partitioning of the same split graph, unpatched servers) on 2
emulated hosts over veth and over a link throttled to 1 Gbit/s (:mod:`dsgraph.cluster.netns`),
both scored on the same held-out edges and negatives; then on one host: 2 partitions against
one process training the whole graph, INT2 activations, in-batch negatives with the
contrastive loss, SAR full-batch training, and the feature-only MLP. Node tasks
(configs/regression.yaml, configs/multilabel.yaml): the GNN against the MLP, and INT2's cost.

Edges/s = positive training edges per second summed over trainers, median over epochs 2.. of a
run, then over repeats (timed rows; spread shown). Accuracy rows run once per training seed
(0, 1): median and range. ``job_memory_mb``: the peak over the job of the summed PSS of every
process of the job, as its supervisor measures it (:class:`benchmarks.jobs.SupervisedMemory`:
shared memory counted once).
"""
from benchmarks.tasks.report import VIEW, render
from benchmarks.tasks.runner import run

__all__ = ["VIEW", "render", "run"]
