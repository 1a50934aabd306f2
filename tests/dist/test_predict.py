"""``python -m predict`` end to end: sar, sampled and dsmpnn runs, outputs checked against a
single-process forward pass of the checkpointed model over the original graph; one-line errors."""
from __future__ import annotations

import hashlib
import importlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from torch import nn

from dsgraph.data import load_graph
from dsgraph.errors import ConfigError
from dsgraph.models.gnn import capture_layer_input
from dsgraph.models.registry import build_model
from dsgraph.runs import RunFolder
from tests.dist import jobs

# Float32 models: the distributed and the single-process forward sum neighbours in another
# order, so values agree to rounding (measured max difference 5e-7), not bit for bit.
TOL = 1e-5


@pytest.fixture(scope="module")
def graph_setup(tmp_path_factory):
    """A 600-node graph in 2 random partitions and its config (SAR; sampled settings too)."""
    tmp = tmp_path_factory.mktemp("predict")
    cfg = tmp / "graph.yaml"
    cfg.write_text(f"""
dataset: {{num_nodes: 600, avg_degree: 6, num_classes: 4, feat_dim: 8, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp}/parts}}
model: {{name: sage, args: {{hidden: 8, num_layers: 2}}}}
train: {{mode: sar, epochs: 1, lr: 0.02, timeout_s: 150}}
sampled: {{fanouts: [4, 4], batch_size: 64, eval_batch_size: 256}}
""")
    importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])  # no job: in here
    return tmp, cfg


@pytest.fixture(scope="module")
def sar_run(graph_setup) -> Path:
    """A 1-epoch SAR run on ``graph_setup`` (its tests only read it)."""
    tmp, cfg = graph_setup
    jobs.train(cfg, tmp / "sar")
    return tmp / "sar"


def _reference(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Probabilities, predicted classes and embeddings of every original node: the best
    checkpoint's model run in this process over the whole, unpartitioned graph; and the
    model's hidden width."""
    cfg = RunFolder(run).config()
    g = load_graph(cfg.dataset)
    model = build_model(cfg.model.name, g.ndata["feat"].shape[1],
                        int(g.ndata["label"].max()) + 1, cfg.model.args)
    RunFolder(run).load_weights(model, "best")
    model.eval()
    with torch.no_grad(), capture_layer_input(model) as captured:
        logits = model(g, g.ndata["feat"])
    return (torch.softmax(logits, 1).numpy(), logits.argmax(1).numpy(), captured[-1].numpy(),
            cfg.model.args["hidden"])


def _check_against_reference(run: Path, got: dict[str, np.ndarray]) -> None:
    prob, pred, emb, hidden = _reference(run)
    assert np.array_equal(got["node_id"], np.arange(len(prob)))  # every node once, sorted
    assert np.abs(got["prob"] - prob).max() <= TOL
    assert np.abs(got["embedding"] - emb).max() <= TOL
    assert got["embedding"].shape == (len(prob), hidden)
    assert np.allclose(got["prob"].sum(1), 1.0, atol=TOL)
    top2 = np.sort(prob, 1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * TOL  # rounding cannot swap these rows' classes
    assert clear.mean() > 0.95 and np.array_equal(got["pred"][clear], pred[clear])


def _logs(run: Path) -> dict[str, str]:
    return {p.name: p.read_text(errors="replace") for p in (run / "logs").iterdir()}


@pytest.mark.timeout(300)
def test_sar_predictions_as_csv_equal_a_single_process_forward(sar_run, tmp_path):
    run = sar_run
    logs = _logs(run)
    out = tmp_path / "sar.csv"
    jobs.predict(run, "--out", str(out), "--embeddings")
    frame = pd.read_csv(out)
    got = {"node_id": frame["node_id"].to_numpy(), "pred": frame["pred"].to_numpy(),
           "prob": frame[[f"prob_{k}" for k in range(4)]].to_numpy(),
           "embedding": frame[[f"embedding_{k}" for k in range(8)]].to_numpy()}
    assert list(frame.columns) == ["node_id", "pred", *(f"prob_{k}" for k in range(4)),
                                   *(f"embedding_{k}" for k in range(8))]
    _check_against_reference(run, got)
    # The job's logs are its own; the training logs are untouched.
    assert _logs(run) == logs
    assert sorted(p.name for p in (run / "predictions_job" / "logs").iterdir()) == [
        "predict0.log", "predict1.log"]


@pytest.mark.timeout(300)
def test_sampled_predictions_as_npz_equal_a_single_process_forward(sampled_run):
    run = sampled_run.path
    logs = _logs(run)
    jobs.predict(run, "--embeddings")
    with np.load(run / "predictions.npz") as data:  # the default output
        got = dict(data)
    assert sorted(got) == ["embedding", "node_id", "pred", "prob"]
    _check_against_reference(run, got)
    assert _logs(run) == logs
    assert {"server0.log", "trainer0.log", "trainer1.log"} <= {
        p.name for p in (run / "predictions_job" / "logs").iterdir()}


@pytest.mark.timeout(300)
def test_dsmpnn_predictions_are_the_evaluated_test_fields(darcy_three_epochs):
    run = darcy_three_epochs.path
    jobs.predict(run)
    with np.load(run / "predictions.npz") as data:
        got = dict(data)
    assert sorted(got) == ["node", "pos", "pred", "sample", "target"]
    points = 24 * 24
    assert np.array_equal(got["sample"], np.repeat([0, 1], points))
    assert np.array_equal(got["node"], np.tile(np.arange(points), 2))
    assert got["pos"].shape == (2 * points, 2) and got["pred"].shape == (2 * points, 1)
    # The same inference as the final evaluation: its relative L2 error comes back.
    rel = [np.linalg.norm(got["pred"][s] - got["target"][s]) / np.linalg.norm(got["target"][s])
           for s in (got["sample"] == 0, got["sample"] == 1)]
    summary = jobs.summary(run)
    assert float(np.mean(rel)) == pytest.approx(summary["test_rel_l2"], rel=1e-6)
    assert "best_epoch" not in summary and not (run / "best.pt").exists()  # no validation metric


def _error(capsys, module: str, *args: str) -> str:
    """The one stderr line of ``python -m module *args`` failing with a user error (run in this
    process: these checks come before any job starts)."""
    main = importlib.import_module(f"{module}.__main__").main
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.timeout(200)
def test_user_errors_are_one_line(graph_setup, sar_run, tmp_path, capsys):
    _, cfg = graph_setup
    run = sar_run
    assert "no such folder" in _error(capsys, "predict", "--run", str(tmp_path / "nope"))
    # An unfinished run: config and checkpoint, no metrics.json.
    broken = tmp_path / "unfinished"
    broken.mkdir()
    for name in ("config.yaml", "checkpoint.pt"):
        shutil.copy(run / name, broken / name)
    assert "has not finished" in _error(capsys, "predict", "--run", str(broken))
    missing = tmp_path / "no_dir" / "p.csv"
    assert f"folder {missing.parent} does not exist" in _error(
        capsys, "predict", "--run", str(run), "--out", str(missing))
    assert ".npz or .csv" in _error(capsys, "predict", "--run", str(run), "--out",
                                    str(tmp_path / "p.parquet"))
    # A model without `layers` has no recognisable last hidden layer.
    plug = tmp_path / "plugin"
    shutil.copytree(run, plug, ignore=shutil.ignore_patterns("predictions*"))
    data = yaml.safe_load((plug / "config.yaml").read_text())
    data["model"] = {"name": "tests.dist.test_predict:TwoConv", "args": {}}
    (plug / "config.yaml").write_text(yaml.safe_dump(data))
    marker = json.loads((plug / ".dsgraph-run.json").read_text())  # as if trained with it
    marker["config_sha256"] = hashlib.sha256((plug / "config.yaml").read_bytes()).hexdigest()
    (plug / ".dsgraph-run.json").write_text(json.dumps(marker))
    assert "TwoConv has no `layers`" in _error(capsys, "predict", "--run", str(plug),
                                               "--embeddings")
    # Issue 13: fanouts shorter than the model's layers, before anything starts.
    line = _error(capsys, "train", "--config", str(cfg), "--out", str(tmp_path / "r"), "--set",
                  "train.mode=sampled", "--set", "sampled.fanouts=[4]")
    assert "sampled.fanouts: [4]" in line and "model.args.num_layers" in line
    assert not (tmp_path / "r").exists()


class TwoConv(nn.Module):
    """A plug-in model with named layers and no ``layers`` list."""

    def __init__(self, in_feats: int, num_classes: int) -> None:
        super().__init__()
        import dgl.nn as dglnn
        self.conv1 = dglnn.SAGEConv(in_feats, 8, "mean")
        self.conv2 = dglnn.SAGEConv(8, num_classes, "mean")

    def forward(self, blocks, x):
        return self.conv2(blocks[1], torch.relu(self.conv1(blocks[0], x)))


def test_plug_in_model_reading_a_missing_block_names_the_fanouts(graph_setup):
    from dsgraph.modes.sampled.source import FanoutBlocks

    _, cfg_path = graph_setup
    import dgl
    from dsgraph import config as config_mod

    cfg = config_mod.load(cfg_path, ["sampled.fanouts=[4]"])
    block = dgl.to_block(dgl.graph(([0, 1], [1, 0])), torch.tensor([0, 1]))
    with pytest.raises(ConfigError, match=r"sampled.fanouts: \[4\] gives 1 block.*reads block 1"):
        TwoConv(3, 2)(FanoutBlocks([block], cfg), torch.zeros(2, 3))
