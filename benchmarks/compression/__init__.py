"""Activation compression: saved bytes, step peak memory, epoch time and accuracy, fp32 vs INT2.

3-layer GraphSAGE, GCN and GAT (hidden 256) on the synthetic DC-SBM graph, full-graph and sampled
(one-process ``dgl.dataloading.DataLoader`` + ``NeighborSampler``): fp32, row-wise INT2 (EXACT)
and block-wise INT2 for several block sizes with uniform and variance-optimal levels, and both
with EXACT's random projection (kept fraction 1/8, on inputs of linear maps only). Saved bytes
are counted in the saved-tensor hooks (de-duplicated by storage); fp32 goes through the same hooks
in measure-only mode. Epoch time: fp32 and compressed epochs interleaved, overhead = median of
the per-pair ratios (robust to other load on a shared machine). Accuracy: full-graph training to
convergence of the key settings (see ``ACC_SETTINGS``) on a graph sized to fit the time budget.
Step peak (``peak_step_mb``, settings in ``PEAK_SETTINGS``): the real peak of a training step,
measured in a fresh process per setting after a warm-up step
(:func:`benchmarks.compression.case.step_peak`, following :mod:`benchmarks.memory`); measured
inside the long-running benchmark process it was not, as the allocator kept memory from earlier
settings.
"""
from benchmarks.compression.report import VIEW, render
from benchmarks.compression.runner import run

__all__ = ["VIEW", "render", "run"]
