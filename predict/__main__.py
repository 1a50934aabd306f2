"""``python -m predict --run RUN [--out FILE] [--embeddings] [--checkpoint best|last]``: a finished
run's model applied to every node (graph runs) or every test point (DS-MPNN runs).

The job runs on the run's own cluster (``RUN/config.yaml``), computed as evaluation computes
them: exact layer-wise inference over the DistGraph (``sampled``; models without
``forward_layer`` from sampled neighbourhoods, as their evaluation), the full-graph SAR forward
(``sar``), or full-field inference (``dsmpnn``). ``--checkpoint best`` (default) uses the model
of the best validation epoch (``best.pt``; the last one where a run kept no best), ``last``
the last epoch's. Output: ``RUN/predictions.npz`` by default, or ``--out FILE`` ending in
``.npz`` or ``.csv``; columns and layout: :mod:`predict.output`. The job's logs go to
``RUN/predictions_job/logs/``, apart from the training logs.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from dsgraph import checkpoint
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.cluster.launch import run_workers
from dsgraph.errors import UserError, cli_main
from dsgraph.models.gnn import output_layer
from dsgraph.models.registry import build_model
from dsgraph.runs import load_run_config, run_fingerprint
from predict.output import check_out_path
from train import strategy_class

WORKER = "predict.worker"
JOB_DIR = "predictions_job"  # inside the run folder; a name run folders may hold (dsgraph.runs)


def check_run(run: Path) -> None:
    """``run`` is a run folder whose training finished and left a checkpoint."""
    if not run.is_dir():
        raise UserError(f"--run {run}: no such folder")
    if not (run / "config.yaml").is_file():
        raise UserError(f"--run {run}: not a dsgraph run folder (no config.yaml)")
    if not (run / "metrics.json").is_file():
        raise UserError(f"--run {run}: training has not finished (no metrics.json); finish it "
                        f"with `python -m train --config {run / 'config.yaml'} --out {run} "
                        f"--resume`")
    if checkpoint.load(run, "last") is None:
        raise UserError(f"--run {run}: no {checkpoint.CHECKPOINT} to load the model from")


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Check the run and the output path, run the prediction job, say where the file is."""
    parser = argparse.ArgumentParser(prog="python -m predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="a finished run folder")
    parser.add_argument("--out", type=Path,
                        help="output file, .npz or .csv (default: RUN/predictions.npz)")
    parser.add_argument("--embeddings", action="store_true",
                        help="also write each node's embedding (the input of the output layer)")
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best",
                        help="the best-validation model (default) or the last epoch's")
    args = parser.parse_args(argv)
    run = args.run
    check_run(run)
    cfg = load_run_config(run)
    out = check_out_path(args.out or run / "predictions.npz")
    if args.embeddings:
        if cfg.train.mode == "dsmpnn":
            raise UserError("--embeddings: DS-MPNN runs export predicted fields only")
        output_layer(build_model(cfg.model.name, 4, 2, cfg.model.args))  # dims don't matter
    prepared = strategy_class(cfg.train.mode).prepare(cfg)
    checkpoint.check_fingerprint(run, run_fingerprint(cfg, prepared), "predict")
    job = run.resolve() / JOB_DIR
    shutil.rmtree(job, ignore_errors=True)  # the logs of an earlier prediction job
    job.mkdir()
    args_ = ["--run", str(run.resolve()), "--out", str(out), "--checkpoint", args.checkpoint,
             *(["--embeddings"] if args.embeddings else [])]
    if cfg.train.mode == "sampled":
        run_dgl_job(job, prepared, cfg.cluster, WORKER, args_, cfg.train.timeout_s)
    else:
        run_workers(job, cfg.cluster, WORKER, cfg.num_workers, args_, cfg.train.timeout_s,
                    name="predict")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
