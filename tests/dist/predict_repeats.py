"""A prediction job process for the consistency harness: ``python -m predict``'s worker, its
restore and predict repeated in one job.

Started by the run's strategy (``launch``) as ``python -m tests.dist.predict_repeats --run-dir
JOB``; reads ``JOB/case.json``: ``run`` (a finished run folder), ``repeats``, ``delay_rank`` and
``delay_s`` (that rank sleeps before each restore), ``pairs`` (link prediction: original-id
pairs to score after the node outputs). Before each restore every rank scrambles what a restore
must overwrite (its parameters, and its partition's rows of server-held embedding tables),
so a rank that reads before the others' restore has landed reads garbage, as a fresh job's
servers would serve their initial rows. Rank 0 writes ``JOB/out<i>.npz`` (and ``pairs<i>.npz``).
"""
from dsgraph.cluster import dgl_compat

dgl_compat.apply_from_env()  # process entry point: patch before DGL starts

import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tests.dist.trainer_process import run  # noqa: E402


def scramble(model: torch.nn.Module) -> None:
    """Overwrite what loading a checkpoint restores: parameters (this process's) and this
    partition's rows of every server-held embedding table; collective."""
    from dsgraph import dist
    from dsgraph.distgraph.hetero_inputs import HeteroInputs
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 10.0)
        for m in model.modules():
            if isinstance(m, HeteroInputs):
                pb = m.g.get_partition_book()
                for t, emb in m.embeddings.items():
                    ids = pb.partid2nids(pb.partid, t)
                    emb.weight[ids] = torch.full((ids.numel(), emb.embedding_dim), 1e3)
    dist.barrier()  # everyone scrambled before anyone restores


def main(job: Path) -> None:
    """Open the run's trainer once; restore and predict ``repeats`` times."""
    from dsgraph.modes import strategy_class
    from dsgraph.runs import RunFolder
    from dsgraph.trainer import Trainer
    case = json.loads((job / "case.json").read_text())
    folder = RunFolder(case["run"])
    cfg = folder.config()
    strategy = strategy_class(cfg)(cfg)
    trainer = Trainer(cfg, folder.path, strategy)
    model = trainer.open()
    for i in range(case["repeats"]):
        scramble(model)
        if trainer.rank == case["delay_rank"]:
            time.sleep(case["delay_s"])
        folder.load_weights(model, "last")
        model.eval()
        with torch.no_grad():
            strategy.pairs = None
            out = strategy.predict(trainer, False)
            if trainer.rank == 0:
                np.savez(job / f"out{i}.npz", **out)
            if case.get("pairs") is not None:
                strategy.pairs = np.asarray(case["pairs"], dtype=np.int64)
                scores = strategy.predict(trainer, False)
                if trainer.rank == 0:
                    np.savez(job / f"pairs{i}.npz", **scores)
    trainer.finish()


if __name__ == "__main__":
    run(main)
