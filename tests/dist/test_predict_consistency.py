"""The prediction consistency harness: for each mode x task x graph kind that predicts, what a
2-partition prediction job returns equals one process running the checkpointed model over the
whole graph with full neighbourhoods, in every one of many repeats, half of them with one rank's
restore delayed; and each case's run, trained twice with one seed, is the same run.

Each case trains one epoch on a tiny graph (2 random partitions, 2 trainers), then one job
(:mod:`tests.dist.predict_repeats`) restores and predicts :data:`REPEATS` times, scrambling the
restored state before each restore (parameters and server-held embedding rows), and the
heterogeneous and link cases also run ``python -m predict`` itself. A rank that reads another
partition's rows before their restore or their output has landed shows as rows off the
reference (the heterogeneous case failed this way before the restore's barrier and the owned-rows
split: rows at 1e3-scrambled embeddings, uniform 0.25 probabilities).
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dsgraph import checkpoint
from dsgraph.config import load as load_config
from dsgraph.data import load_graph
from dsgraph.models.registry import build_model
from dsgraph.modes import strategy_class
from dsgraph.runs import RunFolder
from tests.dist import jobs
from tests.dist.test_edge_tasks import edge_reference

REPEATS = 40  # the odd ones with rank 1's restore delayed by DELAY_S
DELAY_S = 0.2
# float32: the distributed and the single-process forward sum neighbours in another order
TOL = 2e-5
PAIRS = [[0, 1], [5, 17], [42, 42], [99, 3], [7, 250]]


def _config(tmp: Path, body: str) -> Path:
    cfg = tmp / "case.yaml"
    cfg.write_text(body)
    importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])
    return cfg


@pytest.fixture(scope="module")
def node_config(tmp_path_factory) -> Path:
    """A 600-node graph in 2 random partitions: node classification in either mode."""
    tmp = tmp_path_factory.mktemp("node")
    return _config(tmp, f"""
dataset: {{num_nodes: 600, avg_degree: 6, num_classes: 4, feat_dim: 8, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp}/parts}}
model: {{name: sage, args: {{hidden: 8, num_layers: 2}}}}
train: {{epochs: 1, lr: 0.02, timeout_s: 150}}
sampled: {{fanouts: [4, 4], batch_size: 64, eval_batch_size: 128}}
""")


@pytest.fixture(scope="module")
def link_config(tmp_path_factory) -> Path:
    """A 600-node graph whose held-out edges leave it, in 2 random partitions."""
    tmp = tmp_path_factory.mktemp("link")
    return _config(tmp, f"""
dataset: {{num_nodes: 600, avg_degree: 8, num_classes: 4, feat_dim: 8, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp}/parts}}
model: {{name: gcn, args: {{hidden: 8, num_layers: 2}}}}
train: {{epochs: 1, lr: 0.02, timeout_s: 150}}
task: {{name: link_prediction, edge_split: [0.8, 0.1, 0.1], negatives: 1, eval_negatives: 20,
       hits_k: 10, hits_negatives: 100}}
sampled: {{fanouts: [4, 4], batch_size: 64, eval_batch_size: 128}}
""")


@pytest.fixture(scope="module")
def edge_config(tmp_path_factory) -> Path:
    """A 600-node graph with planted edge classes in 2 random partitions."""
    tmp = tmp_path_factory.mktemp("edge")
    return _config(tmp, f"""
dataset: {{num_nodes: 600, avg_degree: 6, num_classes: 4, feat_dim: 8, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp}/parts}}
model: {{name: sage, args: {{hidden: 8, num_layers: 2}}}}
train: {{epochs: 1, lr: 0.02, timeout_s: 150}}
task: {{name: edge_classification}}
sampled: {{fanouts: [4, 4], batch_size: 64, eval_batch_size: 128}}
""")


@pytest.fixture(scope="module")
def hetero_config(tmp_path_factory) -> Path:
    """A generated papers/authors/fields/institutions graph (featureless types learn embedding
    rows held by the servers) in 2 random partitions; fanouts above every degree, remote rows
    cached exactly, so the sampled outputs are the full-neighbourhood ones."""
    tmp = tmp_path_factory.mktemp("hetero")
    return _config(tmp, f"""
dataset: {{name: synthetic_hetero, num_nodes: 600, avg_degree: 6, num_classes: 4, feat_dim: 8,
          train_frac: 0.5, val_frac: 0.2, test_frac: 0.3, cache_dir: {tmp}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp}/parts}}
model: {{name: rgcn, args: {{hidden: 8, num_layers: 2, dropout: 0.2}}}}
train: {{epochs: 1, lr: 0.02, timeout_s: 150}}
sampled: {{fanouts: [1000, 1000], batch_size: 64, eval_batch_size: 64, embedding_dim: 8,
          feature_cache_bits: 32}}
""")


def _train(cfg: Path, name: str, *sets: str) -> RunFolder:
    """The case's run, trained twice with the same seed: the same run, every epoch's figures
    and every checkpointed tensor (server-held embedding tables included) bit for bit."""
    runs = [cfg.parent / f"{name}{k}" for k in (1, 2)]
    for run in runs:
        jobs.train(cfg, run, *sets)
    first, second = ([_figures(r) for r in jobs.epochs(run)] for run in runs)
    assert first == second and all(len(r) >= 3 for r in first), (first, second)
    _assert_same_state(*(checkpoint.read(run / "checkpoint.pt")["model"] for run in runs))
    return RunFolder(runs[0])


def _figures(record: dict) -> dict:
    """An epoch's loss and metrics (not its timings or memory, which measure the machine)."""
    return {k: v for k, v in record.items()
            if k in ("epoch", "loss") or k.startswith(("train_", "val_", "test_"))}


def _assert_same_state(a: dict, b: dict, where: str = "") -> None:
    assert sorted(a) == sorted(b), where
    for key, value in a.items():
        if isinstance(value, dict):
            _assert_same_state(value, b[key], f"{where}{key}.")
        else:
            assert torch.equal(value, b[key]), f"{where}{key} differs between same-seed runs"


def _repeat_job(run: RunFolder, pairs: bool = False) -> list[dict[str, dict]]:
    """:data:`REPEATS` restores and predictions in one job of the run's own cluster."""
    cfg = run.config()
    strategy = strategy_class(cfg)
    job = run.path / "repeats_job"
    job.mkdir()
    (job / "case.json").write_text(json.dumps({
        "run": str(run.path), "repeats": REPEATS, "delay_rank": 1, "delay_s": DELAY_S,
        "pairs": PAIRS if pairs else None}))
    strategy.launch(cfg, job, strategy.prepare(cfg), "tests.dist.predict_repeats", [],
                    name="predict")
    out = []
    for i in range(REPEATS):
        with np.load(job / f"out{i}.npz") as f:
            rows = {"out": dict(f)}
        if pairs:
            with np.load(job / f"pairs{i}.npz") as f:
                rows["pairs"] = dict(f)
        out.append(rows)
    return out


def _state(run: RunFolder) -> dict[str, torch.Tensor]:
    return checkpoint.read(run.path / "checkpoint.pt")["model"]


def _homogeneous_reference(run: RunFolder, width: int) -> np.ndarray:
    """The last checkpoint's model over the whole graph (the training graph: held-out edges
    removed for link prediction), in this process: its output rows."""
    cfg = run.config()
    g = load_graph(cfg.dataset, cfg.task_name)
    if cfg.task_name == "link_prediction":
        from dsgraph.cli.partition import edge_split
        g, _ = edge_split(g, cfg)
    model = build_model(cfg.model.name, g.ndata["feat"].shape[1], width, cfg.model.args)
    if cfg.task_name == "link_prediction":
        from dsgraph.tasks.link_prediction import make_decoder
        model.link_decoder = make_decoder(cfg.task.decoder, width)
    run.load_weights(model, "last")
    with torch.no_grad():
        return model.eval()(g, g.ndata["feat"]).numpy()


def _check_all(outs: list[dict], check) -> None:
    """Every repeat passes ``check`` and equals the first bit for bit; the failures' repeat
    numbers otherwise."""
    failed = []
    for i, rows in enumerate(outs):
        try:
            check(rows)
            for part, arrays in rows.items():
                assert all(np.array_equal(v, outs[0][part][k]) for k, v in arrays.items()), \
                    f"{part} differ from repeat 0's"
        except AssertionError as exc:
            failed.append((i, str(exc).splitlines()[0][:200]))
    assert not failed, f"{len(failed)} of {len(outs)} repeats differ: {failed[:5]}"


def _node_check(ref_logits: np.ndarray):
    prob = torch.softmax(torch.from_numpy(ref_logits), 1).numpy()

    def check(rows: dict) -> None:
        got = rows["out"]
        assert np.array_equal(got["node_id"], np.arange(len(prob))), "node ids"
        err = np.abs(got["prob"] - prob).max()
        assert err <= TOL, f"max |prob - reference| {err:.3g}"
    return check


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sampled", "sar"])
def test_node_predictions_equal_the_single_process_forward(node_config, mode):
    run = _train(node_config, mode, f"train.mode={mode}")
    _check_all(_repeat_job(run), _node_check(_homogeneous_reference(run, 4)))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sampled", "sar"])
def test_link_predictions_equal_the_single_process_forward(link_config, mode):
    run = _train(link_config, mode, f"train.mode={mode}")
    emb = _homogeneous_reference(run, 8)  # model.args.hidden
    pairs = np.asarray(PAIRS)
    want = _dot_scores(emb, pairs)

    def check(rows: dict) -> None:
        got, scored = rows["out"], rows["pairs"]
        assert np.array_equal(got["node_id"], np.arange(len(emb))), "node ids"
        err = np.abs(got["embedding"] - emb).max()
        assert err <= TOL * max(1.0, np.abs(emb).max()), f"max |embedding - reference| {err:.3g}"
        assert np.array_equal(scored["src"], pairs[:, 0]) and \
            np.array_equal(scored["dst"], pairs[:, 1]), "pairs"
        assert np.allclose(scored["score"], want, rtol=1e-4, atol=1e-4), "pair scores"
    _check_all(_repeat_job(run, pairs=True), check)


@pytest.mark.timeout(300)
def test_edge_predictions_equal_the_single_process_forward(edge_config):
    run = _train(edge_config, "sampled")
    rows, g = edge_reference(run, "last")
    prob = torch.softmax(torch.from_numpy(rows), 1).numpy()

    def check(rows: dict) -> None:
        got = rows["out"]
        assert np.array_equal(got["edge_id"], np.arange(len(prob))), "edge ids"
        err = np.abs(got["prob"] - prob).max()
        assert err <= TOL, f"max |prob - reference| {err:.3g}"
    _check_all(_repeat_job(run), check)


def _dot_scores(emb: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The ``dot`` decoder's scores (task.decoder's default) of ``pairs``' embeddings."""
    return (emb[pairs[:, 0]] * emb[pairs[:, 1]]).sum(1)


def _hetero_reference(run: RunFolder) -> np.ndarray:
    """Papers' probabilities: the checkpointed RGCN over the whole graph in this process, the
    server-held embedding tables mapped back to the graph's own ids."""
    from dsgraph.models.hetero import RGCN
    from dsgraph.partition.reader import orig_ids_per_type
    cfg = run.config()
    g = load_graph(cfg.dataset, cfg.task_name)
    state = _state(run)
    orig = orig_ids_per_type(Path(cfg.partition.out_dir) / f"{cfg.partition.graph_name}.json")
    x = {t: g.nodes[t].data["feat"] for t in g.ntypes if "feat" in g.nodes[t].data}
    tables = state.pop("inputs._extra_state")
    assert tables, "the graph has featureless types (server-held tables)"
    for t, table in tables.items():
        x[t] = torch.empty_like(table)
        x[t][orig[t]] = table  # DistGraph's per-type ids -> the graph's own
    model = RGCN({t: v.shape[1] for t, v in x.items()}, 4, g.canonical_etypes,
                 **cfg.model.args)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    with torch.no_grad():
        return torch.softmax(model.eval()([g, g], x)["paper"], 1).numpy()


@pytest.mark.timeout(300)
def test_hetero_predictions_equal_the_single_process_forward(hetero_config, tmp_path):
    run = _train(hetero_config, "sampled")
    prob = _hetero_reference(run)

    def check(rows: dict) -> None:
        got = rows["out"]
        assert np.array_equal(got["node_id"], np.arange(len(prob))), "node ids"
        err = np.abs(got["prob"] - prob).max()
        assert err <= TOL, f"max |prob - reference| {err:.3g}"
    _check_all(_repeat_job(run), check)
    outs = []
    for k in range(2):
        jobs.predict(run.path, "--checkpoint", "last", "--out", str(tmp_path / f"p{k}.npz"))
        with np.load(tmp_path / f"p{k}.npz") as f:
            outs.append(dict(f))
        check({"out": outs[-1]})
    assert all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])
