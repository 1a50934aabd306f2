"""The task contract: node classification and field regression behind one interface."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from dsgraph import config as cfgmod
from dsgraph.config.sections import mode_sections
from dsgraph.errors import ConfigError, UserError
from dsgraph.tasks import TASKS, Task, task_class
from dsgraph.tasks.regression import FieldTarget

ROOT = Path(__file__).resolve().parents[1]


def test_every_mode_task_is_registered_and_auto_picks_the_modes_own():
    cfg = cfgmod.load(None)
    for section in mode_sections(cfg):
        for name in section.TASKS:
            assert issubclass(task_class(name), Task) and task_class(name).name == name
    assert set(TASKS) == {t for s in mode_sections(cfg) for t in s.TASKS}
    assert cfg.task == "node_classification"
    assert cfgmod.load(None, ["train.mode=dsmpnn", "dataset.name=darcy"]).task == \
        "field_regression"
    with pytest.raises(ConfigError, match=r"train.task: expected 'auto' or one of "
                                          r"'field_regression' for train.mode 'dsmpnn', got "
                                          r"'node_classification'"):
        cfgmod.load(None, ["train.mode=dsmpnn", "dataset.name=darcy",
                           "train.task=node_classification"])


def test_node_classification_sums_add_up_over_parts_and_outputs_sort_by_id():
    task = task_class("node_classification")()
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.0, 5.0]])
    y = torch.tensor([0, 0, 0, 1])
    whole = task.metric_sums(logits, y)
    parts = [a + b for a, b in zip(task.metric_sums(logits[:1], y[:1]),
                                   task.metric_sums(logits[1:], y[1:]))]
    assert whole == parts == [3.0, 4.0]
    assert task.metrics(whole, "val") == {"val_acc": 0.75}
    assert task.metrics([0.0, 0.0], "test") == {"test_acc": None}
    assert task.split_metrics([*whole, 0.0, 0.0], ["val", "test"]) == \
        {"val_acc": 0.75, "test_acc": None}
    assert torch.isclose(task.loss(logits, y, "sum") / 4, task.loss(logits, y))
    cols = task.outputs(logits, {"node_id": np.array([30, 10, 20, 0])},
                        embedding=torch.arange(8.0).view(4, 2))
    assert cols["node_id"].tolist() == [0, 10, 20, 30]
    assert cols["pred"].tolist() == [1, 1, 0, 0]
    assert np.allclose(cols["prob"].sum(1), 1.0)
    assert cols["embedding"][:, 0].tolist() == [6.0, 2.0, 4.0, 0.0]


def test_field_regression_metrics_match_their_definitions():
    task = task_class("field_regression")()
    rng = np.random.default_rng(0)
    y = rng.normal(size=(3, 5, 2))
    pred = y + rng.normal(scale=0.1, size=y.shape)
    target = FieldTarget(y, 2.0 * y + 1.0, lambda a: 2.0 * a + 1.0)
    got = task.metrics(task.metric_sums(pred, target), "test")
    phys_err = np.linalg.norm((2.0 * pred - 2.0 * y).reshape(3, -1), axis=1)
    ref = np.linalg.norm((2.0 * y + 1.0).reshape(3, -1), axis=1)
    assert got["test_rmse"] == pytest.approx(np.sqrt(np.mean((pred - y) ** 2)), rel=1e-12)
    assert got["test_rel_l2"] == pytest.approx(np.mean(phys_err / ref), rel=1e-12)
    cols = task.outputs(pred, {"sample": np.repeat(np.arange(3), 5)}, target)
    assert cols["pred"].shape == (15, 2) and np.allclose(cols["target"], 2.0 * y.reshape(15, 2) + 1)
    with pytest.raises(UserError, match="--embeddings"):
        task.check_outputs(True, None)


def test_no_import_runs_back_up_a_layer():
    """dsgraph/ imports none of the entry points; train/ never imports predict/."""
    above = {"dsgraph": ("train", "predict", "partition", "benchmarks", "tests"),
             "train": ("predict", "benchmarks", "tests"), "predict": ("benchmarks", "tests"),
             "partition": ("train", "predict", "benchmarks", "tests")}
    for layer, banned in above.items():
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    assert name.split(".")[0] not in banned, (str(path), name)
