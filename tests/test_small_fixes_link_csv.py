"""Link prediction on a DGL CSV folder with no labels and no masks, end to end (issue 46,
items 6.2 and 6.3): partitioned, trained by a real 2-part sampled job, and the stored split's
pairs, in the folder's node ids (``link_split.npz``'s ``<split>_ids``), scored by
``python -m predict --pairs`` as they are."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.dist.jobs import partition, predict, train
from tests.test_link_data import write_plain_csv


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_plain_csv_folder_trains_link_prediction_and_scores_its_split_by_node_id(tmp_path):
    from dsgraph import checkpoint
    folder, ids, _ = write_plain_csv(tmp_path / "plain")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
dataset: {{name: csv, path: {folder}, cache_dir: {tmp_path}/c}}
task: {{name: link_prediction, eval_negatives: 10, hits_k: 5, hits_negatives: 20}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
model: {{name: sage, args: {{hidden: 8}}}}
train: {{mode: sampled, epochs: 1, timeout_s: 200}}
sampled: {{batch_size: 64, fanouts: [5, 5]}}
""")
    partition(cfg)
    train(cfg, tmp_path / "run")
    summary = pd.read_json(tmp_path / "run" / "metrics.json", typ="series")
    assert 0 < summary["val_mrr"] <= 1 and 0 < summary["test_mrr"] <= 1
    predict(tmp_path / "run", "--out", str(tmp_path / "emb.npz"))
    with np.load(tmp_path / "emb.npz") as data:
        assert np.array_equal(np.sort(data["node_id"]), np.sort(ids))  # the folder's ids
        emb = dict(zip(data["node_id"].tolist(), data["embedding"]))
    with np.load(tmp_path / "parts" / "link_split.npz") as split:
        asked = split["test_ids"]
    pd.DataFrame({"src": asked[:, 0], "dst": asked[:, 1]}).to_csv(tmp_path / "pairs.csv",
                                                                  index=False)
    predict(tmp_path / "run", "--pairs", str(tmp_path / "pairs.csv"), "--out",
            str(tmp_path / "scores.csv"))
    scores = pd.read_csv(tmp_path / "scores.csv")
    assert scores[["src", "dst"]].values.tolist() == asked.tolist()
    model = checkpoint.read(tmp_path / "run" / "best.pt")["model"]
    assert not any("relation" in k for k in model)  # task.decoder dot: h_u . h_v
    expected = [float(emb[u] @ emb[v]) for u, v in asked.tolist()]
    assert np.allclose(scores["score"], expected, rtol=1e-4, atol=1e-4)
