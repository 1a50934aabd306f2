"""Edge classification and edge regression trained end to end (`python -m train`, sampled mode,
2 METIS partitions of a 1500-node synthetic graph with planted edge targets, 3 epochs): the
loss falls and the model learns the planted targets, metrics.json holds the task's figures,
and they equal scikit-learn's on the predictions `python -m predict` exports; those predictions
cover every edge of the input once, keyed by edge id and endpoints, and equal one process
running the checkpointed model and edge head over the whole graph."""
from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import (accuracy_score, f1_score, mean_absolute_error, mean_squared_error,
                             r2_score)

from dsgraph.data import load_graph
from dsgraph.data.edge_targets import user_edges
from dsgraph.models.registry import build_model
from dsgraph.runs import RunFolder
from dsgraph.tasks.edge import EdgeHead
from dsgraph.tasks.link_prediction import embedding_width
from tests.dist import jobs

# float32 predictions, float64 sums: figures agree with scikit-learn's to rounding
TOL = 1e-6
# the distributed and the one-process forward sum neighbours in another order (float32)
FORWARD_TOL = 2e-5
CLASSES = 4
# task -> the metrics every evaluated split reports, and the test figure the planted targets
# make reachable in 3 epochs (chance: 0.25 accuracy; R² 0)
TASKS = {"edge_classification": (("acc", "macro_f1", "f1_per_class"), ("acc", 0.5)),
         "edge_regression": (("rmse", "mae", "r2"), ("r2", 0.3))}


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, Path]:
    """One config per task (its own partitions, 2 METIS parts), partitioned."""
    tmp = tmp_path_factory.mktemp("edge_tasks")
    out = {}
    for task in TASKS:
        cfg = tmp / f"{task}.yaml"
        cfg.write_text(f"""
dataset: {{num_nodes: 1500, avg_degree: 8, num_classes: {CLASSES}, feat_dim: 16,
          feat_signal: 0.5, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, out_dir: {tmp}/parts_{task}}}
model: {{name: sage, args: {{hidden: 16, num_layers: 2}}}}
train: {{mode: sampled, epochs: 3, lr: 0.03, timeout_s: 150}}
task: {{name: {task}, edge_split: [0.5, 0.2, 0.3]}}
sampled: {{fanouts: [5, 5], batch_size: 256, eval_batch_size: 512}}
""")
        importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])
        out[task] = cfg
    return out


def _sklearn(task: str, pred: dict[str, np.ndarray], y: np.ndarray) -> dict[str, object]:
    """The task's figures of one split's exported predictions, by scikit-learn."""
    if task == "edge_regression":
        p = pred["pred"].astype(np.float64)
        return {"rmse": np.sqrt(mean_squared_error(y, p)), "mae": mean_absolute_error(y, p),
                "r2": r2_score(y, p)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division warnings of absent classes
        return {"acc": accuracy_score(y, pred["pred"]),
                "macro_f1": f1_score(y, pred["pred"], average="macro"),
                "f1_per_class": list(f1_score(y, pred["pred"], labels=range(CLASSES),
                                              average=None))}


def edge_reference(run: RunFolder, which: str = "best") -> tuple[np.ndarray, object]:
    """The checkpointed model over the whole graph in this process (full neighbourhoods) and
    its edge head on every input edge: the head's rows, and the graph."""
    cfg = run.config()
    g = load_graph(cfg.dataset, cfg.task_name, cfg.task.edge_split)
    width = embedding_width(cfg.model.args)
    model = build_model(cfg.model.name, g.ndata["feat"].shape[1], width, cfg.model.args)
    out_width = CLASSES if cfg.task_name == "edge_classification" else 1
    model.edge_head = EdgeHead(width, out_width)
    run.load_weights(model, which)
    src, dst = (t[:user_edges(g)] for t in g.edges())
    with torch.no_grad():
        h = model.eval()(g, g.ndata["feat"])
        return model.edge_head(h[src], h[dst]).numpy(), g


@pytest.mark.timeout(400)
@pytest.mark.parametrize("task", list(TASKS))
def test_edge_task_trains_and_predicts_what_one_process_computes(configs, tmp_path, task):
    run = tmp_path / "run"
    jobs.train(configs[task], run)
    records, summary = jobs.epochs(run), jobs.summary(run)
    assert len(records) == 3 and records[-1]["loss"] < records[0]["loss"], records
    names, (learnt, floor) = TASKS[task]
    for split in ("val", "test"):
        for name in names:
            assert summary.get(f"{split}_{name}") is not None, (split, name, summary)
    assert summary[f"test_{learnt}"] > floor, summary
    jobs.predict(run)
    with np.load(run / "predictions.npz") as data:
        pred = dict(data)
    rows, g = edge_reference(RunFolder(run))
    n = user_edges(g)
    src, dst = (t[:n].numpy() for t in g.edges())
    # every input edge once, in edge-id order, with its endpoints
    assert np.array_equal(pred["edge_id"], np.arange(n))
    assert np.array_equal(pred["src"], src) and np.array_equal(pred["dst"], dst)
    if task == "edge_classification":
        prob = torch.softmax(torch.from_numpy(rows), 1).numpy()
        assert np.abs(pred["prob"] - prob).max() <= FORWARD_TOL
        assert pred["pred"].shape == (n,)
    else:
        assert pred["pred"].shape == (n, 1)
        assert np.abs(pred["pred"] - rows).max() <= FORWARD_TOL * max(1.0, np.abs(rows).max())
    # the run's test figures are scikit-learn's on the exported test edges
    mask = g.edata["test_mask"][:n].numpy()
    label = g.edata["label"][:n].numpy()[mask]
    expected = _sklearn(task, {k: v[mask] for k, v in pred.items()}, label)
    for name, value in expected.items():
        got = summary[f"test_{name}"]
        if name == "f1_per_class":
            assert np.allclose(got, value, rtol=0, atol=TOL), (got, value)
        else:
            assert abs(got - value) <= TOL, (name, got, value)
