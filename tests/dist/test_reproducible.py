"""The same config and ``train.seed`` give the same run: every epoch's losses and metrics and the
predictions, bit for bit, with sampler processes drawing the trainer's own partition's
neighbourhoods and DGL servers the rest (:mod:`dsgraph.cluster.dgl_compat` seeds each draw),
and on a heterogeneous graph whose featureless types learn server-held embedding tables
(seeded from ``train.seed``) with an attention model and sampled inference. Before those seeds,
two such runs differed from the first epoch on (epoch-1 loss 2.862 vs 2.886 with sampler
processes; RGAT test accuracy 0.7986 vs 0.8128). Every other mode and task is trained twice by
tests/dist/test_predict_consistency.py."""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from tests.dist import jobs

NODE = """
dataset: {{num_nodes: 1500, avg_degree: 8, num_classes: 4, feat_dim: 8, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, out_dir: {tmp}/parts}}
model: {{name: sage, args: {{hidden: 8, num_layers: 2}}}}
train: {{epochs: 2, eval_every: 1, lr: 0.02, timeout_s: 150}}
sampled: {{fanouts: [4, 4], batch_size: 128, eval: sampled}}
"""
HETERO = """
dataset: {{name: synthetic_hetero, num_nodes: 1000, avg_degree: 6, num_classes: 4, feat_dim: 8,
          cache_dir: {tmp}/data}}
partition: {{num_parts: 2, out_dir: {tmp}/parts}}
model: {{name: rgat, args: {{hidden: 8, num_layers: 2}}}}
train: {{epochs: 2, lr: 0.02, timeout_s: 150}}
sampled: {{fanouts: [4, 4], batch_size: 64, embedding_dim: 8}}
"""
# per-epoch figures every case records
KEYS = ("loss", "train_acc", "val_acc", "test_acc", "val_mrr", "test_mrr")


def _records(run: Path) -> list[dict]:
    return [{k: r[k] for k in KEYS if k in r} for r in jobs.epochs(run)]


def _predictions(run: Path) -> dict[str, np.ndarray]:
    jobs.predict(run, "--checkpoint", "last")
    with np.load(run / "predictions.npz") as f:
        return dict(f)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("case, sets", [
    # sampler processes draw the trainer's own partition's neighbourhoods, servers the rest
    (NODE, ("cluster.samplers_per_trainer=1",)),
    (HETERO, ()),
], ids=["sampler_processes", "hetero_rgat"])
def test_same_seed_same_run(tmp_path, case, sets):
    cfg = tmp_path / "case.yaml"
    cfg.write_text(case.format(tmp=tmp_path))
    importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])
    runs = {name: tmp_path / name for name in ("a", "b")}
    for run in runs.values():
        jobs.train(cfg, run, *sets, "train.seed=3")
    a, b = _records(runs["a"]), _records(runs["b"])
    assert len(a) == 2 and all(len(r) >= 2 for r in a), a
    assert a == b  # every figure of every epoch, exactly (they differed before, see the module)
    pa, pb = _predictions(runs["a"]), _predictions(runs["b"])
    assert sorted(pa) == sorted(pb)
    for key in pa:
        assert np.array_equal(pa[key], pb[key]), key
