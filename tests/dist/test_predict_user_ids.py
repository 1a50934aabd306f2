"""``python -m predict`` names nodes by the user's ids: a DGL CSV folder's ``node_id`` values
(any integers, listed in any order), homogeneous and multi-type (the target type's), each row's
prediction checked against a single-process forward of the checkpointed model; real jobs on 2
partitions (tests/test_user_ids.py: the loaders, the sidecar file and positional formats)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.dist.jobs import ROOT, partition, predict, train

HETERO = ROOT / "configs" / "hetero.yaml"


def scramble_ids(folder: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Give every node of a DGL CSV folder a new id: distinct, unordered, negative ones too
    (edges renamed alike); the new ids per type, in the order DGL numbers nodes (sorted)."""
    meta = yaml.safe_load((folder / "meta.yaml").read_text())
    rng = np.random.default_rng(seed)
    maps = {}
    for item in meta["node_data"]:
        df = pd.read_csv(folder / item["file_name"])
        new = rng.choice(np.arange(-500, 10**6), len(df), replace=False)
        new[0] = -7  # below every other id: ids need not be positive
        maps[item.get("ntype", "_V")] = dict(zip(df["node_id"].tolist(), new.tolist()))
        df["node_id"] = new
        df.to_csv(folder / item["file_name"], index=False)
    for item in meta["edge_data"]:
        s, _, d = item.get("etype", ["_V", "_E", "_V"])
        df = pd.read_csv(folder / item["file_name"])
        df["src_id"] = df["src_id"].map(maps[s])
        df["dst_id"] = df["dst_id"].map(maps[d])
        df.to_csv(folder / item["file_name"], index=False)
    return {t: np.sort(np.fromiter(m.values(), dtype=np.int64)) for t, m in maps.items()}


def check_rows(out: dict, ids: np.ndarray, prob: np.ndarray, tol: float) -> None:
    """Every id once, sorted; each row's probabilities those of the node with that id."""
    assert out["node_id"].dtype == np.int64
    assert np.array_equal(out["node_id"], ids)  # the CSV's ids, sorted, each once
    pos = np.searchsorted(ids, out["node_id"])  # the id's node in DGL's (sorted) numbering
    np.testing.assert_allclose(out["prob"], prob[pos], atol=tol)
    assert np.array_equal(out["pred"], out["prob"].argmax(1))


@pytest.mark.timeout(300)
def test_homogeneous_csv_predictions_carry_its_node_ids(tmp_path):
    from dsgraph.data import load_graph
    from dsgraph.data.csv_dataset import user_node_ids
    from dsgraph.runs import RunFolder
    from tests.dist.test_predict import TOL, _reference
    from tests.test_datasets_formats import toy, write_dgl_csv
    folder = write_dgl_csv(tmp_path / "toy", toy())
    ids = scramble_ids(folder)["_V"]
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
dataset: {{name: csv, path: {folder}, cache_dir: {tmp_path}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
model: {{name: sage, args: {{hidden: 8}}}}
train: {{mode: sar, epochs: 1, timeout_s: 150}}
""")
    partition(cfg)
    assert (tmp_path / "parts" / "user_node_ids.npz").is_file()
    train(cfg, tmp_path / "run")
    predict(tmp_path / "run", "--out", str(tmp_path / "pred.csv"))
    frame = pd.read_csv(tmp_path / "pred.csv")
    out = {"node_id": frame["node_id"].to_numpy(), "pred": frame["pred"].to_numpy(),
           "prob": frame[[c for c in frame.columns if c.startswith("prob_")]].to_numpy()}
    g = load_graph(RunFolder(tmp_path / "run").config().dataset)
    assert np.array_equal(user_node_ids(g)["_N"], ids)
    check_rows(out, ids, _reference(tmp_path / "run")[0], TOL)


@pytest.mark.timeout(300)
def test_multi_type_csv_predictions_carry_the_target_types_node_ids(tmp_path):
    import torch

    from dsgraph import checkpoint
    from dsgraph.config import DatasetConfig
    from dsgraph.data import load_graph
    from dsgraph.models.hetero import RGCN
    from dsgraph.partition.reader import orig_ids_per_type
    from tests.test_hetero_data import toy, write_dgl_csv_hetero
    folder = write_dgl_csv_hetero(tmp_path / "csv", toy())
    ids = scramble_ids(folder, seed=1)
    user = ("dataset.name=csv", f"dataset.path={folder}", f"dataset.cache_dir={tmp_path}/data",
            f"partition.out_dir={tmp_path}/parts", "partition.method=random",
            "sampled.batch_size=8", "sampled.fanouts=[1000, 1000]",
            "sampled.feature_cache_bits=32", "model.args={hidden: 8}", "train.epochs=1",
            "train.eval_every=1", "train.timeout_s=200")
    partition(HETERO, *user)
    train(HETERO, tmp_path / "run", *user)
    predict(tmp_path / "run", "--checkpoint", "last")
    out = dict(np.load(tmp_path / "run" / "predictions.npz"))
    # the reference: the checkpointed RGCN over the whole graph as loaded (DGL's numbering),
    # the server-held embedding tables of featureless types mapped back to that numbering
    g = load_graph(DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "data")))
    state = checkpoint.read(tmp_path / "run" / "checkpoint.pt")["model"]
    orig = orig_ids_per_type(tmp_path / "parts" / "graph.json")
    x = {t: g.nodes[t].data["feat"] for t in g.ntypes if "feat" in g.nodes[t].data}
    for t, table in state.pop("inputs._extra_state").items():
        x[t] = torch.empty_like(table)
        x[t][orig[t]] = table
    model = RGCN({t: v.shape[1] for t, v in x.items()}, 3, g.canonical_etypes, hidden=8,
                 dropout=0.2)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    with torch.no_grad():
        ref = torch.softmax(model.eval()([g, g], x)["paper"], 1).numpy()
    check_rows(out, ids["paper"], ref, 2e-5)
