"""Link prediction trained end to end (`python -m partition` + `python -m train`, sampled mode,
2 METIS partitions, 2 trainers): the loss falls, metrics.json holds validation and test MRR and
Hits@K, GCN beats the feature-only MLP on the planted community graph, and
`python -m predict` exports every node's embedding (and scores asked pairs); on a DistGraph
the batch's own edges stay out of its sampled neighbourhoods."""
from __future__ import annotations

import contextlib
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

from dsgraph import checkpoint
from tests.dist import jobs

# In-process on this graph (4 epochs): GCN MRR ~0.53, MLP ~0.20; the margin leaves room.
MARGIN = 0.1


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """A 2000-node community graph whose held-out edges leave the graph, in 2 METIS parts."""
    tmp = tmp_path_factory.mktemp("link")
    cfg = tmp / "link.yaml"
    cfg.write_text(f"""
dataset: {{num_nodes: 2000, avg_degree: 10, num_classes: 20, feat_dim: 32, feat_signal: 0.3,
          cache_dir: {tmp}/data}}
partition: {{num_parts: 2, out_dir: {tmp}/parts}}
model: {{name: gcn, args: {{hidden: 32, num_layers: 2}}}}
train: {{mode: sampled, epochs: 3, lr: 0.01, timeout_s: 150}}
task: {{name: link_prediction, edge_split: [0.8, 0.1, 0.1], negatives: 2, eval_negatives: 50,
       hits_k: 20, hits_negatives: 500}}
sampled: {{fanouts: [10, 10], batch_size: 256, eval_batch_size: 1024}}
""")
    importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])
    return cfg


@pytest.fixture(scope="module")
def mlp(config, tmp_path_factory) -> dict:
    """The feature-only baseline's summary (same graph, decoder and training)."""
    run = tmp_path_factory.mktemp("mlp") / "run"
    jobs.train(config, run, "task.decoder=distmult", "model.name=mlp")
    return jobs.summary(run)


@pytest.mark.timeout(400)
def test_link_prediction_trains_and_beats_the_mlp(config, mlp, tmp_path):
    gnn = tmp_path / "gcn"
    # distmult: its learned relation vector must train and reach the checkpoint (DDP, Adam)
    jobs.train(config, gnn, "task.decoder=distmult")
    records, summary = jobs.epochs(gnn), jobs.summary(gnn)
    assert len(records) == 3 and records[-1]["loss"] < records[0]["loss"], records
    for split in ("val", "test"):
        for key in (f"{split}_mrr", f"{split}_hits20"):
            assert summary[key] is not None and 0 < summary[key] <= 1, summary
    values = [r["val_mrr"] for r in records]
    assert summary["best_epoch"] == int(np.argmax(values)) + 1  # highest validation MRR
    # sampled.feature_cache_policy means what it means for node tasks: the default (frequency)
    # caches the rows pre-sampled edge batches read, not the degree ranking's rows
    degree = tmp_path / "degree"
    jobs.train(config, degree, "task.decoder=distmult", "train.epochs=1",
               "sampled.feature_cache_policy=degree")
    first, other = records[0], jobs.epochs(degree)[0]
    assert first["batches"] == other["batches"], (first, other)  # the same edge batches
    assert first["remote_feature_bytes"] != other["remote_feature_bytes"], (first, other)
    relation = checkpoint.read(gnn / "best.pt")["model"]["link_decoder.relation"]
    assert relation.shape == (32,) and not torch.allclose(relation, torch.ones(32))
    baseline = mlp
    print(f"gcn: val_mrr {summary['val_mrr']:.4f} test_mrr {summary['test_mrr']:.4f} "
          f"test_hits20 {summary['test_hits20']:.4f}; mlp: val_mrr {baseline['val_mrr']:.4f} "
          f"test_mrr {baseline['test_mrr']:.4f} test_hits20 {baseline['test_hits20']:.4f}")
    assert summary["test_mrr"] > baseline["test_mrr"] + MARGIN, (summary, baseline)
    # python -m predict: one embedding per node, keyed by the original ids
    jobs.predict(gnn)
    with np.load(gnn / "predictions.npz") as data:
        assert np.array_equal(data["node_id"], np.arange(2000))
        assert data["embedding"].shape == (2000, 32)
        assert set(data) == {"node_id", "embedding"}
        emb = data["embedding"]
    # --pairs: the decoder's scores of the asked pairs, from the same embeddings
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("src,dst\n0,1\n5,1999\n42,42\n")
    jobs.predict(gnn, "--pairs", str(pairs), "--out", str(tmp_path / "scores.csv"))
    import pandas as pd
    scores = pd.read_csv(tmp_path / "scores.csv")
    assert scores[["src", "dst"]].values.tolist() == [[0, 1], [5, 1999], [42, 42]]
    expected = [(emb[u] * relation.numpy() * emb[v]).sum() for u, v in [(0, 1), (5, 1999),
                                                                       (42, 42)]]
    assert np.allclose(scores["score"], expected, rtol=1e-4, atol=1e-4)
    assert np.allclose(scores["prob"], 1 / (1 + np.exp(-scores["score"])), atol=1e-6)


@pytest.mark.timeout(300)
def test_every_training_option_composes(config, mlp, tmp_path):
    # in-batch negatives, the contrastive loss, local sampling, rematerialized first layer and
    # INT2-compressed activations at once: it still trains and beats the feature-only model
    run = tmp_path / "run"
    jobs.train(config, run, "task.decoder=distmult", "task.negative_sampler=in_batch",
               "task.loss=contrastive", "sampled.local_sampling=true",
               "sampled.rematerialize=true", "compression.enabled=true")
    records, summary = jobs.epochs(run), jobs.summary(run)
    assert records[-1]["loss"] < records[0]["loss"], records
    print(f"all options: test_mrr {summary['test_mrr']:.4f}; mlp {mlp['test_mrr']:.4f}")
    assert summary["test_mrr"] > mlp["test_mrr"] + MARGIN, (summary, mlp)


def test_link_partitions_refuse_other_edge_splits(config, tmp_path):
    code, err = jobs.run_main("train", "--config", str(config), "--out", str(tmp_path / "r"),
                              "--set", "task.edge_split=[0.7, 0.1, 0.2]")
    assert code == 2, err[-2000:]
    assert "made with task.edge_split=[0.8, 0.1, 0.1], the config says [0.7, 0.1, 0.2]" \
        in err, err[-2000:]


def test_batch_edges_are_left_out_of_distgraph_neighbourhoods(tmp_path):
    # DGL 2.1's DistGraph.sample_neighbors ignores exclude_edges: stock sampling keeps the
    # batch's edges (the leak this guards against); PairExcludingSampler keeps none of them.
    from tests.dist.sar_cases import worker_context
    proc = worker_context().Process(target=_exclusion_case, args=(str(tmp_path),))
    proc.start()
    proc.join(120)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    assert proc.exitcode == 0, proc.exitcode  # (its traceback is on the captured stderr)
    out = (tmp_path / "counts.txt").read_text()
    stock, ours, local, sampled = (int(x) for x in out.split()[-7::2])
    assert stock > 0 and ours == 0 and local == 0 and sampled > 0, out


def _exclusion_case(folder: str) -> None:
    """tests/dist/link_exclusion_case.py in a process of its own (DGL's distributed state is
    per process), its line to ``folder/counts.txt``."""
    from tests.dist import link_exclusion_case
    with open(f"{folder}/counts.txt", "w") as fh, contextlib.redirect_stdout(fh):
        link_exclusion_case.main(folder)
