"""SAR full-batch training: per-worker activation memory, traffic, time and gradient exactness.

Two graphs: the community (DC-SBM) graph, where few edges cross parts, and a high-cut random
graph (homophily 0, average degree 20), where each part's halo approaches the whole graph.
For each: plain single-process DGL full-graph training (``mode: dgl``, 1 worker) and SAR with
N in {1, 2, 4} workers in modes sar / sa / one_shot, for 3-layer GraphSAGE and 4-head GAT.

SAR rows are real ``train.mode: sar`` jobs (:func:`benchmarks.jobs.train_job`: N
``dsgraph.modes.worker`` processes, the :class:`dsgraph.trainer.Trainer` loop with
:class:`dsgraph.modes.sar.SarStrategy`), each with the hook
:func:`benchmarks.sar.measure.measure`; the figures come from the run's metrics.json / metrics.jsonl. The ``dgl`` row is the peer being
measured, not a dsgraph trainer: :func:`benchmarks.sar.measure.dgl_baseline` is its own minimal
loop (the same loss, Adam step and per-epoch evaluation), run in a fresh process.

Activation memory, as issue 5 defines it: peak RSS minus RSS after loading partition, graph and
model; a fresh process per configuration; median of 3. Each configuration runs 3 times, each
time in fresh processes (N workers, or one plain DGL process) that load the partition (or the
whole graph, with its sparse formats), build the model and optimizer, then train ``EPOCHS``
epochs (evaluating validation accuracy after each). Measurement follows
:mod:`benchmarks.memory` in every process, plain DGL included: loading ends by paging in the
libraries' code and resetting the high-water mark (the hook's ``on_ready``, which the trainer
calls right before it reads its "RSS after loading"), so neither a transient peak while loading
nor torch/DGL code first run in the first epoch (~7-11 MB; ``rss_file_growth_mb`` records what
file-backed RSS still grew) counts; allocations >= 64 KiB are mmap-served from process start.
The peak is VmHWM at the end of training: the summary's ``train_mem_mb`` (worst worker); the
median of the 3 runs is ``peak_act_mb``. Gradients of the first training step (summed over
workers, as the trainer steps with them) are compared with single-process DGL from the same
initial weights, computed in the benchmark process: float32 from the first of the 3 runs,
float64 from one more 1-epoch run with ``train.dtype: float64``.
"""
from benchmarks.sar.report import VIEW, render
from benchmarks.sar.runner import run

__all__ = ["VIEW", "render", "run"]
