"""DS-MPNN on Darcy and airfoil fields: accuracy vs sampled nodes and vs edge cap, 1 vs 2 workers,
resolution transfer.

Every full-run record is a real ``train.mode: dsmpnn`` job (run folder, supervised
``dsgraph.modes.worker`` processes, full-field test inference); it takes test RMSE (standardized
target units) and relative L2, the training error (root of the last epoch's mean loss), optimizer
steps, times, and the largest per-worker peak RSS from the run's metrics.json / metrics.jsonl.
``--quick`` sweep records run the same Trainer in this process (world 1).
Sweeps: ``nodes`` (s at a fixed edge cap), ``edges`` (n_e at fixed s): accuracy only, so they run
as 1-worker jobs two at a time (one per core; P = 2 gives the same numbers, see ``workers``).
``workers``: P = 1, then P = 2 at the base setting, each job alone, one thread per worker; speed
is the median epoch time with the first (warm-up) epoch excluded, and the record keeps the load
(1-minute load average, CPU share of other processes) the job ran under. The workers jobs also
predict a second test set at another resolution (Darcy grid) or point density (airfoil): the
``transfer`` row of each dataset shows the P = 1 model's error at both.
"""
from benchmarks.dsmpnn.report import VIEW, render
from benchmarks.dsmpnn.sweep import run

__all__ = ["VIEW", "render", "run"]
