"""``python -m train --config C [--out RUN] [--set ...] [--resume] [--force]``: train one run.

Resolves the config, runs the mode's launcher-side checks, prepares the run folder (nothing is
touched before every check passed), starts every process of the job (``train.worker`` on each
rank; DistGraph servers too in ``sampled`` mode) under one supervised launcher, draws the run's
``curves.png`` and prints its table. ``python -m train --plot RUN`` redraws the curves of a run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from dsgraph import config as config_mod
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.cluster.launch import run_workers
from dsgraph.config import Config
from dsgraph.curves import plot_curves
from dsgraph.errors import cli_main
from dsgraph.fsutil import remove_orphaned_temps_in
from dsgraph.metrics import print_summary, read_summary, update_summary
from dsgraph.models.registry import resolve as resolve_model
from dsgraph.runs import prepare_run_dir, run_fingerprint
from train import strategy_class

WORKER = "train.worker"


def launch(cfg: Config, run_dir: Path, resume: bool, worker_args: Sequence[str] = (),
           prepared: Any = None) -> dict:
    """Run the job of ``cfg`` in ``run_dir``; return its metrics.json (with launcher figures).

    ``worker_args`` go to every ``train.worker`` (``--hook``s, say); ``prepared`` is what the
    mode's launcher-side :meth:`~dsgraph.trainer.Strategy.prepare` returned (run here if None).
    """
    t0 = time.perf_counter()
    if prepared is None:
        prepared = strategy_class(cfg.train.mode).prepare(cfg)
    args = [*(["--resume"] if resume else []), *worker_args]
    try:
        if cfg.train.mode == "sampled":
            peaks = run_dgl_job(run_dir, prepared, cfg.cluster, WORKER, args,
                                cfg.train.timeout_s)
        else:
            peaks = run_workers(run_dir, cfg.cluster, WORKER, cfg.num_workers, args,
                                cfg.train.timeout_s)
    finally:
        # a worker stopped mid-write (SIGTERM, a fault) leaves its temporary file behind; every
        # job process has ended here, so none of them is a live write
        remove_orphaned_temps_in(run_dir)
    # The supervisor samples every process; the workers' own high-water marks catch short peaks.
    own = read_summary(run_dir).get("peak_rss_mb", 0.0)
    return update_summary(run_dir, wall_s=time.perf_counter() - t0,
                          peak_rss_mb=max([own, *peaks.values()]), peak_rss_mb_per_process=peaks)


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Resolve the config, prepare the run folder, run the job and print its summary."""
    parser = argparse.ArgumentParser(prog="python -m train", description=__doc__)
    config_mod.add_cli_args(parser)
    parser.add_argument("--out", help="run folder (default: train.out_dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing run folder (only one dsgraph created)")
    parser.add_argument("--plot", metavar="RUN", type=Path,
                        help="only redraw RUN/curves.png from its metrics.jsonl")
    args = parser.parse_args(argv)
    if args.plot is not None:
        print(f"curves written to {plot_curves(args.plot)}")
        return
    cfg = config_mod.load(args.config, args.overrides)
    resolve_model(cfg.model.name)  # an unimportable model fails here, not in every worker
    prepared = strategy_class(cfg.train.mode).prepare(cfg)
    fingerprint = run_fingerprint(cfg, prepared)
    run_dir = prepare_run_dir(cfg, args.out, args.resume, args.force, fingerprint)
    launch(cfg, run_dir, args.resume, prepared=prepared)
    plot_curves(run_dir)
    print_summary(run_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
