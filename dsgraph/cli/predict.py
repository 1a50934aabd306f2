"""``python -m predict --run RUN [--out FILE] [--embeddings] [--checkpoint best|last]``: a finished
run's model applied to every node (graph runs) or every test point (DS-MPNN runs).

The job runs on the run's own cluster (``RUN/config.yaml``), computed as evaluation computes
them: exact layer-wise inference over the DistGraph (``sampled``; models without
``forward_layer`` from sampled neighbourhoods, as their evaluation), the full-graph SAR forward
(``sar``), or full-field inference (``dsmpnn``). ``--checkpoint best`` (default) uses the model
of the best validation epoch (``best.pt``; the last one where a run kept no best), ``last``
the last epoch's. Output: ``RUN/predictions.npz`` by default, or ``--out FILE`` ending in
``.npz`` or ``.csv``; columns and layout: :mod:`dsgraph.predict.output`. Link prediction runs take
``--pairs FILE`` (a csv of ``src``, ``dst`` node ids of your input graph: a CSV folder's
``node_id`` values): the output then holds those
pairs' ``src``, ``dst``, ``score`` (the decoder's logit) and ``prob`` (its sigmoid). The job's
logs go to ``RUN/predictions_job/logs/``, apart from the training logs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dsgraph.cli import command_parser
from dsgraph.errors import UserError, cli_main
from dsgraph.models.registry import probe_model
from dsgraph.runs import RunFolder, run_fingerprint
from dsgraph.tasks import task_class
from dsgraph.predict.output import check_out_path, user_ids
from dsgraph.predict.pairs import read_pairs
from dsgraph.modes import strategy_class

WORKER = "dsgraph.predict.worker"
JOB_DIR = "predictions_job"  # inside the run folder; a name run folders may hold (dsgraph.runs)


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Check the run and the output path, run the prediction job, say where the file is."""
    parser = command_parser("python -m predict", __doc__, config=False,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="a finished run folder")
    parser.add_argument("--out", type=Path,
                        help="output file, .npz or .csv (default: RUN/predictions.npz)")
    parser.add_argument("--embeddings", action="store_true",
                        help="also write each node's embedding (the input of the output layer)")
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best",
                        help="the best-validation model (default) or the last epoch's")
    parser.add_argument("--pairs", type=Path,
                        help="link prediction: a csv of node pairs (columns src, dst: node ids "
                             "of your input graph) to score instead of writing embeddings")
    args = parser.parse_args(argv)
    run = RunFolder.finished(args.run)  # locked: a training job writing it is refused
    try:
        cfg = run.config()
        out = check_out_path(args.out or run.path / "predictions.npz")
        task_class(cfg.task_name).check_outputs(
            args.embeddings,
            probe_model(cfg.model.name, cfg.model.args) if args.embeddings else None)
        strategy = strategy_class(cfg)
        prepared = strategy.prepare(cfg)
        if args.pairs is not None:
            if cfg.task_facts.trains_on != "links":
                raise UserError(f"--pairs: only link prediction runs score node pairs; this "
                                f"run's task is {cfg.task_name!r}")
            read_pairs(args.pairs, json.loads(Path(prepared).read_text())["num_nodes"],
                       user_ids(cfg))
        run.check_fingerprint(run_fingerprint(cfg, prepared), "predict")
        if args.checkpoint == "best":  # (the last one was read by the fingerprint check)
            run.checkpoint("best")  # a corrupt file is refused before any process starts
        job = run.job_dir(JOB_DIR)  # the logs of an earlier prediction job go
        args_ = ["--run", str(run.path.resolve()), "--out", str(out), "--checkpoint",
                 args.checkpoint, *(["--embeddings"] if args.embeddings else []),
                 *(["--pairs", str(args.pairs.resolve())] if args.pairs is not None else [])]
        strategy.launch(cfg, job, prepared, WORKER, args_, name="predict")
    finally:
        run.unlock()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
