"""A typed chunked folder (DGL's chunked format with several node and edge types) as a user runs
it: ``python -m partition`` takes the in-memory pipeline and writes DGL's typed partitions,
``python -m train`` trains sampled RGCN on 2 partitions, ``python -m predict`` writes one row per
paper (the pattern of test_hetero_train.py's user-folder test)."""
from __future__ import annotations

import json

import numpy as np

from dsgraph.config import DatasetConfig
from dsgraph.data.chunked_hetero import write_hetero_chunked
from dsgraph.data.hetero import generate_hetero
from tests.dist.jobs import partition, predict, run_main, summary, train
from tests.dist.test_hetero_train import HETERO

PAPERS = 600


def test_typed_chunked_folder_partitions_trains_and_predicts(tmp_path):
    """Auto resolves to the in-memory pipeline (reverse relations added on load), the partition
    JSON is typed with paper as the target, training and predictions cover every paper; an
    explicit streamed pipeline is refused in one line naming the setting."""
    g = generate_hetero(DatasetConfig(name="synthetic_hetero", num_nodes=PAPERS, num_classes=4,
                                      feat_dim=8, avg_degree=6, add_reverse_edges=False))
    folder = write_hetero_chunked(g, tmp_path / "mag", 3, edge_format="csv").parent
    user = ("dataset.name=chunked", f"dataset.path={folder}",
            f"dataset.cache_dir={tmp_path / 'data'}", f"partition.out_dir={tmp_path / 'parts'}",
            "partition.num_parts=2", "sampled.batch_size=64", "sampled.fanouts=[4, 4]",
            "model.args={hidden: 8}", "train.epochs=1", "train.timeout_s=200")
    code, err = run_main("partition", "--config", str(HETERO),
                         *[a for s in (*user, "partition.pipeline=streamed") for a in ("--set", s)])
    assert code == 2 and "partition.pipeline" in err and "Traceback" not in err, err[-2000:]
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1
    partition(HETERO, *user)
    meta = json.loads((tmp_path / "parts" / "graph.json").read_text())
    assert meta["target_ntype"] == "paper" and meta["num_classes"] == 4
    assert len(meta["etypes"]) == 2 * len(g.canonical_etypes)  # reverse relations added
    for t in g.ntypes:
        assert sum(hi - lo for lo, hi in meta["node_map"][t]) == g.num_nodes(t)
    stats = json.loads((tmp_path / "parts" / "partition_stats.json").read_text())
    assert stats.get("pipeline") != "streamed"
    train(HETERO, tmp_path / "run", *user)
    assert summary(tmp_path / "run")["target_ntype"] == "paper"
    predict(tmp_path / "run")
    out = np.load(tmp_path / "run" / "predictions.npz")
    assert sorted(out["node_id"].tolist()) == list(range(PAPERS))
    assert out["prob"].shape == (PAPERS, 4)
