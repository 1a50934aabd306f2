"""Heterogeneous graphs end to end: a generated papers/authors/fields/institutions graph
partitioned into DGL's typed format, trained with sampled RGCN by real DistGraph servers and
trainers (featureless types learn DistEmbedding rows), evaluated and exported by
``python -m predict``; 2 partitions (first layer rematerialized) against 1."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dsgraph.config import DatasetConfig
from dsgraph.data import load_graph
from tests.dist.jobs import ROOT, epochs, partition, predict, run_main, summary, train

HETERO = ROOT / "configs" / "hetero.yaml"
# A graph of a few seconds per epoch; fanouts above every node's degree (the sampler then takes
# every neighbour), so evaluation and predictions are exact full-neighbourhood outputs.
SIZE = ("dataset.num_nodes=3000", "dataset.train_frac=0.5", "dataset.val_frac=0.1",
        "dataset.test_frac=0.3", "sampled.batch_size=256", "sampled.fanouts=[1000, 1000]",
        # remote rows cached exactly (8-bit rows would make predictions differ from the
        # float reference by design)
        "sampled.feature_cache_bits=32", "train.epochs=12", "train.timeout_s=300")


def sets(root: Path, parts: int) -> tuple[str, ...]:
    """Overrides that put the data, partitions and run of ``parts`` parts under ``root``."""
    return (f"dataset.cache_dir={root / 'data'}", f"partition.out_dir={root / f'parts{parts}'}",
            f"partition.num_parts={parts}", *SIZE)


# The 2-partition run rematerializes its first layer (dsgraph.remat.hetero): its accuracy and
# its predictions (a single-process forward of the checkpoint) check that path end to end.
REMAT = ("sampled.rematerialize=true", "seqagg.chunk_rows=256")


@pytest.fixture(scope="module")
def hetero_runs(tmp_path_factory) -> dict[int, Path]:
    """The same graph and model trained on 1 and on 2 partitions (rematerialized)."""
    root = tmp_path_factory.mktemp("hetero")
    runs = {}
    for parts in (1, 2):
        partition(HETERO, *sets(root, parts))
        runs[parts] = root / f"run{parts}"
        train(HETERO, runs[parts], *sets(root, parts), *(REMAT if parts == 2 else ()))
    return runs


def test_partitions_are_typed(hetero_runs):
    """The partition JSON is DGL's heterogeneous format with the target type named."""
    meta = json.loads((hetero_runs[2].parent / "parts2" / "graph.json").read_text())
    assert len(meta["ntypes"]) >= 3 and len(meta["etypes"]) >= 8  # 4 relations + reverses
    assert meta["target_ntype"] in meta["ntypes"]
    assert set(meta["node_map"]) == set(meta["ntypes"])


def test_rgcn_learns_and_two_partitions_match_one(hetero_runs):
    """Training lowers the loss, beats chance by far, and 2 partitions (rematerialized) reach
    1 partition's test accuracy (within 3 points on this small graph; the benchmark states the
    spread)."""
    results = {}
    for parts, run in hetero_runs.items():
        recs = epochs(run)
        assert recs[-1]["loss"] < recs[0]["loss"]
        results[parts] = summary(run)
        assert results[parts]["num_parts"] == parts
        assert results[parts]["target_ntype"] == "paper"
    # the 2-part trainers cache the remote rows they read most (one host: exact rows)
    assert results[2]["feature_cache_mb"] > 0
    assert epochs(hetero_runs[2])[-1]["cache_hit_rate"] > 0.1  # 0.26 measured (a small budget)
    chance = 1 / 8  # configs/hetero.yaml: 8 classes
    assert results[1]["test_acc"] > 3 * chance
    assert abs(results[2]["test_acc"] - results[1]["test_acc"]) < 0.03, results


def test_predictions_equal_a_single_process_forward(hetero_runs):
    """``python -m predict`` on 2 partitions writes one row per paper keyed by its original id,
    equal (float32 tolerance) to one process running the checkpointed RGCN over the whole
    original graph, with the checkpointed embedding tables mapped back to original ids; their
    accuracy on the test papers is the run's."""
    import dgl
    import torch

    from dsgraph import checkpoint
    from dsgraph.models.hetero import RGCN
    from dsgraph.partition.reader import orig_ids_per_type
    run = hetero_runs[2]
    predict(run, "--checkpoint", "last")
    out = np.load(run / "predictions.npz")
    g = dgl.load_graphs(str(next((run.parent / "data").glob("synthetic-hetero-*.dgl"))))[0][0]
    state = checkpoint.read(run / "checkpoint.pt")["model"]
    orig = orig_ids_per_type(run.parent / "parts2" / "graph.json")
    x = {t: g.nodes[t].data["feat"] for t in g.ntypes if "feat" in g.nodes[t].data}
    for t, table in state.pop("inputs._extra_state").items():  # server-held embeddings
        x[t] = torch.empty_like(table)
        x[t][orig[t]] = table  # DistGraph's per-type ids -> the graph's own
    model = RGCN({t: v.shape[1] for t, v in x.items()}, 8, g.canonical_etypes, hidden=64,
                 dropout=0.2)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    with torch.no_grad():
        ref = torch.softmax(model.eval()([g, g], x)["paper"], 1).numpy()
    assert sorted(out["node_id"].tolist()) == list(range(g.num_nodes("paper")))
    np.testing.assert_allclose(out["prob"], ref[out["node_id"]], atol=2e-5)
    papers = g.nodes["paper"].data
    test = papers["test_mask"].bool().numpy()
    pred = np.empty(g.num_nodes("paper"), dtype=np.int64)
    pred[out["node_id"]] = out["pred"]
    acc = float((pred[test] == papers["label"].numpy()[test]).mean())
    assert acc == pytest.approx(epochs(run)[-1]["test_acc"], abs=1e-9)


def test_hetero_refusals(hetero_runs, tmp_path):
    """Options the heterogeneous path has not got, and an unknown relation, are refused in
    one line before any process starts."""
    root = hetero_runs[2].parent
    for overrides, words in ((("sampled.rematerialize=true", "sampled.remat_layers=2"),
                              "sampled.remat_layers"),
                             (("sampled.local_sampling=true",), "sampled.local_sampling"),
                             (("sampled.relation_fanouts={nope: [1, 1]}",), "relation_fanouts"),
                             (("train.mode=sar",), "train.mode")):
        code, err = run_main("train", "--config", str(HETERO), "--out", str(tmp_path / "r"),
                             *[a for s in (*sets(root, 2), *overrides) for a in ("--set", s)])
        assert code != 0 and words in err and "Traceback" not in err, err[-2000:]


def test_user_folders_partition_train_and_predict(tmp_path):
    """A multi-type DGL CSV folder, an ogbn-mag-layout folder (tests/test_hetero_data.py's
    fixtures) and a typed chunked folder partition as a user runs it (the chunked one in memory:
    an explicit streamed pipeline is refused in one line); the chunked one then trains and
    predicts, with predictions for every paper once (after loading, every format takes the same
    path; the CSV one's train and predict: tests/dist/test_predict_user_ids.py)."""
    from dsgraph.data.hetero.chunked import write_hetero_chunked
    from tests.test_hetero_data import COUNTS, toy, write_dgl_csv_hetero, write_ogb_hetero
    data = toy()
    csv = write_dgl_csv_hetero(tmp_path / "csv", data)
    ogb = write_ogb_hetero(tmp_path / "mag", data)
    typed = write_hetero_chunked(
        load_graph(DatasetConfig(name="ogb", path=str(ogb), add_reverse_edges=False,
                                 cache_dir=str(tmp_path / "data"))),
        tmp_path / "chunked", 3, edge_format="csv").parent
    for layout, name, folder in (("csv", "csv", csv), ("ogb", "ogb", ogb),
                                 ("chunked", "chunked", typed)):
        user = (f"dataset.name={name}", f"dataset.path={folder}",
                f"dataset.cache_dir={tmp_path / 'data'}",
                f"partition.out_dir={tmp_path / f'parts-{layout}'}", "sampled.batch_size=8",
                "sampled.fanouts=[4, 4]", "model.args={hidden: 8}", "train.epochs=2",
                "train.timeout_s=200")
        if layout == "chunked":
            code, err = run_main("partition", "--config", str(HETERO), *[
                a for s in (*user, "partition.pipeline=streamed") for a in ("--set", s)])
            assert code == 2 and "partition.pipeline" in err and "Traceback" not in err, err
        partition(HETERO, *user)
        meta = json.loads((tmp_path / f"parts-{layout}" / "graph.json").read_text())
        assert meta["target_ntype"] == "paper" and meta["num_classes"] == 3
        assert sum(hi - lo for lo, hi in meta["node_map"]["author"]) == COUNTS["author"]
    stats = json.loads((tmp_path / "parts-chunked" / "partition_stats.json").read_text())
    assert stats.get("pipeline") != "streamed"
    train(HETERO, tmp_path / "run", *user)
    assert summary(tmp_path / "run")["target_ntype"] == "paper"
    predict(tmp_path / "run")
    out = np.load(tmp_path / "run" / "predictions.npz")
    assert sorted(out["node_id"].tolist()) == list(range(COUNTS["paper"]))
    assert out["prob"].shape == (COUNTS["paper"], 3)
