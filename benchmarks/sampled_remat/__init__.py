"""Sampled training with rematerialization: per-trainer peak activation memory, time per batch, accuracy.

Settings: fanouts [10, 25], [15, 10, 5] and [25, 25] (one layer per fanout), feature width 128
and 512, hidden 256 (GAT: 4 heads of 64), GraphSAGE (mean) and GAT; variants ``stock`` (plain
sampled training), ``remat`` (``sampled.rematerialize``: the first block's sources aggregated one
owning partition at a time, in chunks of ``seqagg.chunk_rows`` rows, rebuilt in backward; for
GAT every layer but the output layer, ``sampled.remat_layers``, see
:func:`benchmarks.sampled_remat.settings.remat_layers`) and ``remat_int2`` (the same plus
``compression.enabled``: INT2 saves inside each group's backward).

Every setting runs real ``train.mode: sampled`` jobs (:func:`benchmarks.jobs.train_job`: 2 METIS
partitions on this host, 2 DistGraph servers, 2 trainers), fresh processes per job, two kinds
per repeat, each trainer with the hook :func:`benchmarks.sampled_remat.meter.measure`, which
wraps the trainer's step and the strategy's epoch and evaluation:
- a **memory job** (``mem_epochs`` epochs) with allocations >= 64 KiB mmap-served in every
  process (:data:`benchmarks.memory.MMAP_ENV`), so that RSS follows live tensors: glibc's
  default keeps freed memory for reuse, and a peak read off RSS would measure that retention
  (stock GAT [15, 10, 5] width 512: ~200 MB under the default against ~100 MB of live peak);
- a **timing job** (``epochs`` epochs, the accuracy too) under glibc's default allocator, what
  a user runs: every mmap-served allocation is a system call and fresh zeroed pages, which
  costs rematerialization (many mid-sized temporaries per chunk) far more than stock (probe
  jobs: stock GAT 0.26 -> 0.40 s per batch, remat + INT2 0.35 -> 0.81 s).
Both jobs' other figures stay in the json (``batch_mmap_s``, ``act_default_mb``).
- before the first batch (``on_ready``) libraries are paged in and RSS is read (``rss_before``);
- the first training batch is a warm-up; after it the RSS high-water mark is reset, and again
  at the start of every later epoch, so evaluation and checkpointing between epochs never count;
- an epoch's activation memory = the trainer's peak RSS during its training batches minus
  ``rss_before``, the worst of the 2 trainers; ``peak_act_mb`` is the median over the measured
  epochs of the setting's ``repeats`` memory jobs (each epoch a fresh measurement after a
  reset), ``act_spread_mb`` their max - min;
- ``batch_s`` = the slower trainer's median time from one step's end to the next's within an
  epoch (sampling, feature pulls, forward, backward, optimizer step), median over the timing
  jobs; ``batch_spread_s`` the interquartile range of those batch times.
``test_acc`` is the timing jobs' median final test accuracy (layer-wise exact inference); they
train ``epochs`` epochs, evaluating every ``eval_every`` epochs, and ``acc_settled`` says whether
the last two validation accuracies of every timing job are within 0.5 point. One thread per
process.
"""
from benchmarks.sampled_remat.report import VIEW, render
from benchmarks.sampled_remat.runner import run

__all__ = ["VIEW", "render", "run"]
