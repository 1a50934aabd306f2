"""Node regression, multilabel and class-weighted node classification trained end to end
(`python -m train`, sampled and sar mode, 2 partitions of a 2000-node synthetic graph, 3
epochs): the loss falls, metrics.json holds the task's figures, the best epoch is the task's
best (lowest validation RMSE for regression), and every distributed figure equals scikit-learn's
on the predictions `python -m predict` exports."""
from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import (accuracy_score, f1_score, mean_absolute_error, mean_squared_error,
                             r2_score, roc_auc_score)

from dsgraph.data import load_graph
from dsgraph.runs import RunFolder
from tests.dist import jobs

# float32 predictions, float64 sums: figures agree with scikit-learn's to rounding
TOL = 1e-6
# task -> (dataset.target, task.class_weights, the metrics every evaluated split reports)
TASKS = {"node_regression": ("regression", "none", ("rmse", "mae", "r2")),
         "multilabel": ("multilabel", "balanced", ("rocauc", "micro_f1", "macro_f1")),
         "node_classification": ("class", "balanced", ("acc", "macro_f1", "f1_per_class"))}
CLASSES, TARGETS = 4, 3


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, Path]:
    """One config per task (its own graph and partitions, 2 METIS parts), partitioned."""
    tmp = tmp_path_factory.mktemp("tasks")
    out = {}
    for task, (target, weights, _) in TASKS.items():
        cfg = tmp / f"{task}.yaml"
        cfg.write_text(f"""
dataset: {{num_nodes: 2000, avg_degree: 8, num_classes: {CLASSES}, feat_dim: 16,
          feat_signal: 0.5, target: {target}, num_targets: {TARGETS}, train_frac: 0.4,
          val_frac: 0.2, test_frac: 0.3, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, out_dir: {tmp}/parts_{task}}}
model: {{name: sage, args: {{hidden: 16, num_layers: 2}}}}
train: {{mode: sampled, epochs: 3, lr: 0.03, timeout_s: 150}}
task: {{name: {task}, class_weights: {weights}}}
sampled: {{fanouts: [5, 5], batch_size: 128, eval_batch_size: 512}}
""")
        importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])
        out[task] = cfg
    return out


def _sklearn(task: str, pred: dict[str, np.ndarray], y: np.ndarray) -> dict[str, object]:
    """The task's figures of the exported predictions ``pred`` of one split, by scikit-learn
    (ROC-AUC as OGB's ogbn-proteins evaluator averages it)."""
    if task == "node_regression":
        p = pred["pred"].astype(np.float64)
        return {"rmse": np.sqrt(mean_squared_error(y, p)), "mae": mean_absolute_error(y, p),
                "r2": r2_score(y, p)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division warnings of absent labels
        if task == "multilabel":
            both = [i for i in range(y.shape[1]) if 0 < y[:, i].sum() < len(y)]
            auc = np.mean([roc_auc_score(y[:, i], pred["prob"][:, i]) for i in both])
            return {"rocauc": auc, "micro_f1": f1_score(y, pred["pred"], average="micro"),
                    "macro_f1": f1_score(y, pred["pred"], average="macro")}
        per_class = f1_score(y, pred["pred"], labels=range(CLASSES), average=None)
        return {"acc": accuracy_score(y, pred["pred"]),
                "macro_f1": f1_score(y, pred["pred"], average="macro"),
                "f1_per_class": list(per_class)}


# Each new task in the mode whose evaluation path differs most for it (sampled: layer-wise
# inference over the DistGraph; sar: the full-graph forward), multi-label in both (its ROC-AUC
# gathers every rank's rows); classification, trained in both modes elsewhere, with balanced
# class weights in sar.
CASES = [("node_regression", "sampled"), ("multilabel", "sampled"), ("multilabel", "sar"),
         ("node_classification", "sar")]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("task, mode", CASES)
def test_task_trains_and_its_metrics_equal_scikit_learns_on_the_predictions(configs, tmp_path,
                                                                          task, mode):
    run = tmp_path / "run"
    jobs.train(configs[task], run, f"train.mode={mode}")
    records, summary = jobs.epochs(run), jobs.summary(run)
    assert len(records) == 3 and records[-1]["loss"] < records[0]["loss"], records
    names = TASKS[task][2]
    for split in ("val", "test"):
        for name in names:
            assert f"{split}_{name}" in summary and summary[f"{split}_{name}"] is not None
    # the best epoch is the task's best validation figure (the first of equal ones)
    key = {"node_regression": "val_rmse", "multilabel": "val_rocauc",
           "node_classification": "val_acc"}[task]
    values = [r[key] for r in records]
    best = int(np.argmin(values) if task == "node_regression" else np.argmax(values))
    assert summary["best_epoch"] == best + 1 and summary[key] == values[best], (values, summary)
    assert summary[f"last_{key}"] == values[-1]
    # python -m predict: the best model's outputs; scikit-learn on them gives the run's figures
    jobs.predict(run)
    with np.load(run / "predictions.npz") as data:
        pred = dict(data)
    g = load_graph(RunFolder(run).config().dataset)
    n = g.num_nodes()
    assert np.array_equal(pred["node_id"], np.arange(n))
    width = CLASSES if task == "node_classification" else TARGETS
    columns = {"node_regression": {"pred": (n, width)},
               "multilabel": {"prob": (n, width), "pred": (n, width)},
               "node_classification": {"pred": (n,), "prob": (n, width)}}[task]
    assert {k: v.shape for k, v in pred.items() if k != "node_id"} == columns
    mask = g.ndata["test_mask"].numpy()
    label = g.ndata["label"].numpy()[mask]
    expected = _sklearn(task, {k: v[mask] for k, v in pred.items()}, label)
    for name, value in expected.items():
        got = summary[f"test_{name}"]
        if name == "f1_per_class":
            assert np.allclose([np.nan if v is None else v for v in got], value, rtol=0,
                               atol=TOL, equal_nan=False), (got, value)
        else:
            assert abs(got - value) <= TOL, (name, got, value)
