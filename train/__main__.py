"""``python -m train --config C [--out RUN] [--set ...] [--resume] [--force]``: train one run.

Resolves the config, prepares the run folder, runs the mode's launcher-side checks, starts every
process of the job (``train.worker`` on each rank; DistGraph servers too in ``sampled`` mode)
under one supervised launcher, and prints the run's table when it ends.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from dsgraph import config as config_mod
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.cluster.launch import run_workers
from dsgraph.config import Config
from dsgraph.errors import cli_main
from dsgraph.metrics import print_summary, read_summary, update_summary
from dsgraph.runs import prepare_run_dir
from train import strategy_class

WORKER = "train.worker"


def launch(cfg: Config, run_dir: Path, resume: bool, worker_args: Sequence[str] = ()) -> dict:
    """Run the job of ``cfg`` in ``run_dir``; return its metrics.json (with launcher figures).

    ``worker_args`` go to every ``train.worker`` (``--hook``s, say).
    """
    t0 = time.perf_counter()
    prepared = strategy_class(cfg.train.mode).prepare(cfg)
    args = [*(["--resume"] if resume else []), *worker_args]
    if cfg.train.mode == "sampled":
        peaks = run_dgl_job(run_dir, prepared, cfg.cluster, WORKER, args, cfg.train.timeout_s)
    else:
        peaks = run_workers(run_dir, cfg.cluster, WORKER, cfg.num_workers, args,
                            cfg.train.timeout_s)
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
    parser.add_argument("--force", action="store_true", help="replace an existing run folder")
    args = parser.parse_args(argv)
    cfg = config_mod.load(args.config, args.overrides)
    run_dir = prepare_run_dir(cfg, args.out, args.resume, args.force)
    launch(cfg, run_dir, args.resume)
    print_summary(run_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
