"""One process of a prediction job: ``python -m dsgraph.predict.worker --run-dir JOB --run RUN
--out FILE [--embeddings] [--checkpoint best|last] [--pairs FILE]``.

Started by ``python -m predict`` on every rank, as ``dsgraph.modes.worker`` is by
``python -m train``: it opens the run's Trainer (runtime, process group, this rank's data, the
model), loads the checkpointed weights and asks the mode's strategy for its outputs; rank 0
writes them.
"""
from __future__ import annotations

from dsgraph.cluster import dgl_compat

# Patch DGL before it starts, at module level on purpose (see dsgraph/modes/worker.py).
dgl_compat.apply_from_env()

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from dsgraph.cluster.worker import run_process_main  # noqa: E402
from dsgraph.runs import RunFolder  # noqa: E402
from dsgraph.trainer import Trainer  # noqa: E402
from dsgraph.predict import output  # noqa: E402
from dsgraph.predict.pairs import read_pairs  # noqa: E402
from dsgraph.modes import strategy_class  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    """Predict this rank's share of the run in ``--run``; rank 0 writes ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m dsgraph.predict.worker", description=__doc__)
    parser.add_argument("--run-dir", required=True, type=Path, help="the prediction job's folder")
    parser.add_argument("--run", required=True, type=Path, help="the trained run folder")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--embeddings", action="store_true")
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best")
    parser.add_argument("--pairs", type=Path)
    args = parser.parse_args(argv)
    run = RunFolder(args.run)
    cfg = run.config()
    strategy = strategy_class(cfg)(cfg)
    trainer = Trainer(cfg, run.path, strategy)
    model = trainer.open()
    epoch = run.load_weights(model, args.checkpoint)
    model.eval()
    ids = None  # the user's node ids: pairs name nodes by them, outputs carry them
    if args.pairs is not None:  # link prediction: score these pairs (checked by the launcher)
        ids = output.user_ids(cfg)
        strategy.pairs = read_pairs(args.pairs, strategy.num_nodes(), ids)
    with torch.no_grad():
        arrays = strategy.predict(trainer, args.embeddings)
    if arrays is not None:
        if any(k in arrays for k in output.ID_COLUMNS):  # graph runs (not DS-MPNN points)
            arrays = output.with_user_ids(arrays, ids if args.pairs else output.user_ids(cfg))
        output.write(args.out, arrays)
        rows = len(next(iter(arrays.values())))
        print(f"predictions of epoch {epoch}'s model: {rows:,} rows "
              f"({', '.join(arrays)}) -> {args.out}", flush=True)
    trainer.finish()


if __name__ == "__main__":
    run_process_main(main)
