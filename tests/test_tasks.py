"""The task contract: node classification, node regression, multilabel and field regression
behind one interface; their metrics against scikit-learn's, the best-epoch rule, task config."""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sklearn.metrics import (f1_score, mean_absolute_error, mean_squared_error, r2_score,
                             roc_auc_score)

from dsgraph import config as cfgmod
from dsgraph.config import TaskConfig
from dsgraph.config.sections import mode_sections
from dsgraph.errors import ConfigError, UserError
from dsgraph.tasks import TASK_CLASSES, Task, task_class
from dsgraph.config.tasks import TASK_FACTS
from dsgraph.tasks.evaluation import split_figures
from dsgraph.tasks.multilabel import probabilities
from dsgraph.tasks.regression import FieldTarget
from dsgraph.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
# Sums in float64 of float32 rows: figures agree with scikit-learn's to rounding.
EXACT = 1e-12


def _task(name: str, width: int, **cfg) -> Task:
    task = task_class(name)(TaskConfig(**cfg))
    task.bind(width)
    return task


def test_every_mode_task_is_registered_and_auto_picks_the_modes_first():
    cfg = cfgmod.load(None)
    for section in mode_sections(cfg):
        for name in section.TASKS:
            assert issubclass(task_class(name), Task) and task_class(name).name == name
    assert set(TASK_CLASSES) == {t for s in mode_sections(cfg) for t in s.TASKS}
    assert cfg.task_name == "node_classification" and cfg.task.name == "auto"
    assert cfgmod.load(None, ["train.mode=dsmpnn", "dataset.name=darcy"]).task_name == \
        "field_regression"
    regression = cfgmod.load(None, ["task.name=node_regression", "dataset.target=regression"])
    assert regression.task_name == "node_regression"
    assert "task" not in regression.to_dict()["train"]
    with pytest.raises(ConfigError, match=r"task.name: task 'node_classification' runs in "
                                          r"train.mode 'sampled' or 'sar', got train.mode "
                                          r"'dsmpnn'"):
        cfgmod.load(None, ["train.mode=dsmpnn", "dataset.name=darcy",
                           "task.name=node_classification"])
    # one declaration per task: what config checks read is what the class trains by
    assert list(TASK_CLASSES) == list(TASK_FACTS)
    for name, facts in TASK_FACTS.items():
        cls = task_class(name)
        assert cls.facts is facts and cls.name == name and cls.trains_on == facts.trains_on
        assert all(name in s.TASKS for s in mode_sections(cfg) if s.MODE in facts.modes)


@pytest.mark.parametrize("sets, message", [
    (["train.task=node_regression"], "train.task: this key is now task.name"),
    (["task.name=node_regression"],
     "dataset.target: task 'node_regression' trains on 'regression' targets; expected "
     "'regression', got 'class'"),
    (["dataset.target=multilabel"],
     "dataset.target: task 'node_classification' trains on 'class' targets; expected 'class', "
     "got 'multilabel'"),
    (["task.name=link_prediction", "train.mode=dsmpnn", "dataset.name=darcy"],
     "task.name: task 'link_prediction' runs in train.mode 'sampled' or 'sar', got train.mode "
     "'dsmpnn'"),
    (["task.name=unknown"],
     "task.name: expected 'auto' or one of 'node_classification', 'node_regression', "
     "'multilabel', 'link_prediction', 'edge_classification', 'edge_regression' for "
     "train.mode 'sampled', got 'unknown'"),
    (["task.name=edge_regression", "train.mode=sar"],
     "task.name: task 'edge_regression' runs in train.mode 'sampled', got train.mode 'sar'"),
    (["task.name=edge_classification", "dataset.name=synthetic_hetero"],
     "dataset.name: task 'edge_classification' reads edge targets from 'synthetic' or 'csv' or "
     "'file', got 'synthetic_hetero'"),
    (["task.name=edge_regression", "dataset.target=regression"],
     "dataset.target: task 'edge_regression' reads its targets from the edges; leave "
     "dataset.target at 'class', got 'regression'"),
    (["task.name=edge_classification", "task.negatives=3"],
     "task.negatives: only task 'link_prediction' reads it; remove it or set task.name, got 3"),
    (["task.name=edge_classification", "cluster.samplers_per_trainer=1"],
     "cluster.samplers_per_trainer: task 'edge_classification' samples in the trainer; "
     "expected 0, got 1"),
    (["task.class_weights=inverse"],
     "task.class_weights: expected one of 'none', 'balanced' or a list, got 'inverse'"),
    (["task.class_weights=[1, -1]"],
     "task.class_weights: expected 'none', 'balanced' or a list of numbers >= 0 (one per "
     "class, not all 0), got [1, -1]"),
    (["task.class_weights=[0, 0]", "dataset.num_classes=2"],
     "task.class_weights: expected 'none', 'balanced' or a list of numbers >= 0 (one per "
     "class, not all 0), got [0, 0]"),
    (["task.class_weights=[1, 2]"],
     "task.class_weights: expected 40 weights (one per class, dataset.num_classes), got 2"),
    (["task.name=multilabel", "dataset.target=multilabel", "task.class_weights=[1, 2]"],
     "task.class_weights: expected 4 weights (one per label, dataset.num_targets), got 2"),
    (["task.name=node_regression", "dataset.target=regression", "task.class_weights=balanced"],
     "task.class_weights: task 'node_regression' has no classes to weight; expected 'none', "
     "got 'balanced'"),
    (["train.mode=dsmpnn", "dataset.name=darcy", "dataset.target=regression"],
     "dataset.target: dataset 'darcy' does not read it (only synthetic, file, csv, ogb, "
     "chunked do); "
     "remove it or set dataset.name, got 'regression'"),
])
def test_task_config_errors_are_one_line_naming_the_key(sets, message):
    with pytest.raises(ConfigError) as err:
        cfgmod.load(None, sets)
    # a key a --set gave is named by its --set; a rule about a default, by <defaults>
    given = {s.split("=", 1)[0] for s in sets}
    assert str(err.value) == (f"--set {message}" if message.split(": ", 1)[0] in given
                              else f"<defaults>: {message}")


def test_task_options_accepted():
    cfg = cfgmod.load(None, ["task.name=multilabel", "dataset.target=multilabel",
                             "dataset.num_targets=3", "task.class_weights=[1, 2.5, 0]"])
    assert cfg.task.class_weights == [1, 2.5, 0]
    assert cfgmod.load(None, ["task.class_weights=balanced"]).task.class_weights == "balanced"
    # a user's file: the count of classes is only known from the data (checked in bind)
    cfgmod.load(None, ["dataset.name=ogb", "dataset.path=x", "task.class_weights=[1, 2]"])
    with pytest.raises(ConfigError, match=r"^task.class_weights: expected 3 weights \(one per "
                                          r"class of the data\), got 2$"):
        _task("node_classification", 3, class_weights=[1, 2])


def test_node_classification_sums_add_up_over_parts_and_outputs_sort_by_id():
    task = _task("node_classification", 2)
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.0, 5.0]])
    y = torch.tensor([0, 0, 0, 1])
    whole = task.metric_sums(logits, y)
    parts = [a + b for a, b in zip(task.metric_sums(logits[:1], y[:1]),
                                   task.metric_sums(logits[1:], y[1:]))]
    # correct, rows; per class: true positives, predictions, labels
    assert whole == parts == [3.0, 4.0, 2.0, 1.0, 2.0, 2.0, 3.0, 1.0]
    assert task.metrics(whole, "val") == {"val_acc": 0.75, "val_macro_f1": (0.8 + 2 / 3) / 2,
                                          "val_f1_per_class": [0.8, 2 / 3]}
    empty = [0.0] * task.num_sums
    assert task.metrics(empty, "test") == {"test_acc": None, "test_macro_f1": None,
                                           "test_f1_per_class": None}
    assert task.split_metrics([*whole, *empty], ["val", "test"])["test_acc"] is None
    assert torch.isclose(task.loss(logits, y, "sum") / 4, task.loss(logits, y))
    cols = task.outputs(logits, {"node_id": np.array([30, 10, 20, 0])},
                        embedding=torch.arange(8.0).view(4, 2))
    assert cols["node_id"].tolist() == [0, 10, 20, 30]
    assert cols["pred"].tolist() == [1, 1, 0, 0]
    assert np.allclose(cols["prob"].sum(1), 1.0)
    assert cols["embedding"][:, 0].tolist() == [6.0, 2.0, 4.0, 0.0]


def test_node_classification_f1_equals_scikit_learn_and_weights_the_loss():
    rng = np.random.default_rng(0)
    k = 5
    logits = torch.from_numpy(rng.normal(size=(200, k)).astype(np.float32))
    logits[:, 4] -= 100.0  # class 4 never predicted ...
    y = torch.from_numpy(rng.integers(0, k - 1, 200))  # ... nor labelled: not averaged
    task = _task("node_classification", k)
    got = task.metrics(task.metric_sums(logits, y), "test")
    pred = logits.argmax(1).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per_class = f1_score(y.numpy(), pred, labels=range(k), average=None)
    assert abs(got["test_macro_f1"] - f1_score(y.numpy(), pred, average="macro")) < EXACT
    assert np.allclose(got["test_f1_per_class"][:4], per_class[:4], rtol=0, atol=EXACT)
    assert got["test_f1_per_class"][4] is None
    # weights: a weighted sum over rows, normalised by the row count
    weighted = _task("node_classification", k, class_weights=[1, 2, 3, 4, 5])
    ref = torch.nn.functional.cross_entropy(logits, y, reduction="none") * \
        torch.tensor([1.0, 2, 3, 4, 5])[y]
    assert torch.isclose(weighted.loss(logits, y, "sum"), ref.sum())
    assert torch.isclose(weighted.loss(logits, y), ref.sum() / 200)
    # balanced: n / (classes * count) over the training targets (scikit-learn's rule)
    balanced = task_class("node_classification")(TaskConfig(class_weights="balanced"))
    train = torch.tensor([0, 0, 0, 1, 2, 2])
    balanced.bind(4, lambda: train)
    assert balanced.weight.tolist() == [6 / 12, 6 / 4, 6 / 8, 1.0]  # class 3: no node, any


def test_node_regression_metrics_equal_scikit_learn_and_add_up_over_parts():
    rng = np.random.default_rng(1)
    y = torch.from_numpy(rng.normal(3.0, 2.0, size=(300, 3)).astype(np.float32))
    out = y + torch.from_numpy(rng.normal(0.0, 0.5, size=(300, 3)).astype(np.float32))
    out[:, 2] = 7.0  # a constant prediction: R² of that target below 0
    task = _task("node_regression", 3)
    assert task.num_sums == 13 and task.lower_is_better and task.selection_metric == "val_rmse"
    parts = [a + b for a, b in zip(task.metric_sums(out[:120], y[:120]),
                                   task.metric_sums(out[120:], y[120:]))]
    got = task.metrics(parts, "val")
    t, p = y.numpy().astype(np.float64), out.numpy().astype(np.float64)
    assert abs(got["val_rmse"] - np.sqrt(mean_squared_error(t, p))) < EXACT
    assert abs(got["val_mae"] - mean_absolute_error(t, p)) < EXACT
    assert abs(got["val_r2"] - r2_score(t, p)) < 1e-9  # from sums of squares: rounding
    assert task.metrics([0.0] * 13, "test") == {"test_rmse": None, "test_mae": None,
                                                "test_r2": None}
    # a constant target: 1 when predicted exactly, else 0 (scikit-learn's force_finite)
    const = torch.ones(4, 1)
    one = _task("node_regression", 1)
    assert one.metrics(one.metric_sums(const, const), "a")["a_r2"] == r2_score(const, const)
    assert one.metrics(one.metric_sums(const * 2, const), "a")["a_r2"] == r2_score(const,
                                                                                  const * 2)
    assert torch.isclose(task.loss(out, y, "sum") / 300, task.loss(out, y))
    assert torch.isclose(task.loss(out, y), ((out - y) ** 2).mean())
    cols = task.outputs(out[:3], {"node_id": np.array([5, 1, 3])}, embedding=torch.eye(3))
    assert cols["node_id"].tolist() == [1, 3, 5]
    assert cols["pred"].shape == (3, 3) and np.array_equal(cols["pred"], out[[1, 2, 0]].numpy())
    assert cols["embedding"].tolist() == [[0, 1, 0], [0, 0, 1], [1, 0, 0]]


def test_multilabel_f1_and_roc_auc_equal_scikit_learn_and_ogb():
    rng = np.random.default_rng(2)
    n, labels = 400, 5
    y = (rng.random((n, labels)) < [0.1, 0.3, 0.5, 0.0, 0.2]).astype(np.float32)
    y[:, 4] = 1.0  # one class only: left out of ROC-AUC, as OGB's evaluator does
    logits = torch.from_numpy((2 * y - 1 + rng.normal(0, 1.5, (n, labels))).astype(np.float32))
    logits[:, 3] = -9.0  # label 3: never on, never predicted (F1 0 in the macro average)
    task = _task("multilabel", labels)
    got = task.metrics(task.metric_sums(logits, torch.from_numpy(y)), "test")
    pred = (torch.sigmoid(logits) > 0.5).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert abs(got["test_micro_f1"] - f1_score(y, pred, average="micro")) < EXACT
        assert abs(got["test_macro_f1"] - f1_score(y, pred, average="macro")) < EXACT
    prob = probabilities(logits)  # as exported: float32
    assert np.abs(prob - torch.sigmoid(logits).numpy()).max() < 1e-7
    ogb = np.mean([roc_auc_score(y[:, i], prob[:, i]) for i in range(3)])
    assert task.gathers_rows
    assert task.row_metrics(logits.numpy(), y, "test") == {"test_rocauc": ogb}
    assert task.row_metrics(logits.numpy(), np.ones_like(y), "a") == {"a_rocauc": None}
    cols = task.outputs(logits[:2], {"node_id": np.array([9, 4])})
    assert list(cols) == ["node_id", "prob", "pred"]
    assert np.array_equal(cols["prob"], prob[[1, 0]])
    assert np.array_equal(cols["pred"], pred[[1, 0]].astype(np.int8))
    # the positives' weights: negatives / positives per label over the training rows
    balanced = task_class("multilabel")(TaskConfig(class_weights="balanced"))
    train = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    balanced.bind(2, lambda: train)
    assert balanced.weight.tolist() == [1.0, 3.0]
    ref = torch.nn.functional.binary_cross_entropy_with_logits(
        logits[:4, :2], train, pos_weight=torch.tensor([1.0, 3.0]))
    assert torch.isclose(balanced.loss(logits[:4, :2], train), ref)


def test_split_figures_add_sums_and_gather_rows():
    task = _task("multilabel", 2)
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    out = torch.tensor([[2.0, -1.0], [-1.0, 0.5], [0.3, -0.2], [-2.0, 1.0]])
    figures = split_figures(task, {"val": (out, y), "test": (out[:0], y[:0])})
    # label 0 ranks both positives first (1.0), label 1 half of the pairs (0.5)
    assert figures["val_rocauc"] == pytest.approx(0.75) and figures["test_rocauc"] is None
    assert figures["val_micro_f1"] == pytest.approx(2 * 3 / (4 + 4))
    assert figures["test_micro_f1"] is None


def test_best_epoch_is_the_lowest_error_or_the_highest_score():
    def best(task: Task, values: list) -> tuple[int, bool]:
        key = task.selection_metric
        records = [{"epoch": e + 1, key: v} for e, v in enumerate(values)]
        trainer = SimpleNamespace(strategy=SimpleNamespace(task=task))
        summary = Trainer._best_eval(trainer, records, {key: values[-1]})
        return summary["best_epoch"], Trainer._is_best(trainer, records[:-1], records[-1])

    regression, classification = _task("node_regression", 1), _task("node_classification", 2)
    assert best(regression, [0.9, 0.5, 0.7, 0.5]) == (2, False)  # the first of equal errors
    assert best(regression, [0.9, 0.5, 0.7, 0.4]) == (4, True)
    assert best(classification, [0.5, 0.9, 0.7, 0.9]) == (2, False)
    assert best(classification, [0.5, None, 0.7]) == (3, True)


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


# The commands and what only they run, above the rest of dsgraph (its lower layers).
UPPER = ("dsgraph.cli", "dsgraph.modes", "dsgraph.predict")
# The checkout's own folders: the command shims, benchmarks and tests; no dsgraph module
# imports them (an installed dsgraph has none of them).
CHECKOUT = ("train", "predict", "partition", "benchmarks", "tests")
SHIMS = ("train", "predict", "partition")


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports (anywhere in it) and every string in it that names a
    dsgraph upper-layer module as a whole (``"dsgraph.modes.worker"``, ``"module:Class"``: what
    is launched with ``python -m`` or imported by name)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, (str(path), "relative import")
            names.append(node.module or "")
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and re.fullmatch(r"dsgraph\.(cli|modes|predict)(\.\w+)*(:\w+)?", node.value)):
            names.append(node.value.split(":")[0])
    return names


def _under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_no_import_runs_back_up_a_layer():
    """dsgraph's lower layers import none of the commands, modes or predictions (dsgraph.cli,
    dsgraph.modes, dsgraph.predict) and nothing of the checkout; the modes never import the
    commands or predict, the predictions never the commands, partitioning never the modes or
    predict, training never predict; the checkout's shims import only dsgraph.cli."""
    upper = {"dsgraph/modes": CHECKOUT + ("dsgraph.cli", "dsgraph.predict"),
             "dsgraph/predict": CHECKOUT + ("dsgraph.cli",),
             "dsgraph/cli/partition.py": CHECKOUT + ("dsgraph.modes", "dsgraph.predict"),
             "dsgraph/cli/chunk.py": CHECKOUT + ("dsgraph.modes", "dsgraph.predict"),
             "dsgraph/cli/train.py": CHECKOUT + ("dsgraph.predict",),
             "dsgraph/cli/predict.py": CHECKOUT, "dsgraph/cli/__init__.py": CHECKOUT + UPPER}
    checked = set()
    for where, banned in upper.items():
        paths = [ROOT / where] if where.endswith(".py") else (ROOT / where).rglob("*.py")
        for path in paths:
            checked.add(path)
            for name in _imports(path):
                assert not _under(name, banned), (str(path), name)
    lower = [p for p in (ROOT / "dsgraph").rglob("*.py") if p not in checked]
    assert len(checked) >= 15 and len(lower) > 50  # every module falls under a rule
    assert not [p for p in (ROOT / "dsgraph" / "cli").glob("*.py") if p not in checked]
    for path in lower:
        for name in _imports(path):
            assert not _under(name, CHECKOUT + UPPER), (str(path), name)
    for shim in SHIMS:
        for path in (ROOT / shim).rglob("*.py"):
            for name in _imports(path):
                assert _under(name, ("dsgraph.cli",)), (str(path), name)
