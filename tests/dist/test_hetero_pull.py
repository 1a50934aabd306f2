"""A real DistDGL job on a heterogeneous partitioning: 2 servers and 2 trainers on one host
pull every node's features of every featured type; dmlc/dgl#3621 (several partitions per host)
must not corrupt them (dsgraph.cluster.dgl_compat)."""
from __future__ import annotations

import json

import pytest
import torch

from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.config import ClusterConfig
from dsgraph.partition import partition_hetero_graph
from tests.dist.test_sampled import _job_shm
from tests.test_hetero_partition import make_graph


@pytest.mark.timeout(180)
def test_hetero_features_correct_with_two_partitions_on_one_host(tmp_path):
    g = make_graph()
    # Column 0 carries the node's type and id, so a row served from the wrong partition or
    # type is obvious.
    for t, nt in enumerate(("paper", "author")):
        feat = g.nodes[nt].data["feat"]
        feat[:, 0] = torch.arange(g.num_nodes(nt), dtype=torch.float32) + 1000 * (t + 1)
    part = partition_hetero_graph(g, 2, tmp_path / "parts", method="random")
    run = tmp_path / "run"
    run.mkdir()
    original = {"paper": {k: g.nodes["paper"].data[k] for k in ("feat", "label", "train_mask")},
                "author": {"feat": g.nodes["author"].data["feat"]}}
    torch.save(original, run / "original.pt")
    run_dgl_job(run, part, ClusterConfig(), "tests.dist.hetero_pull_check", timeout_s=90)
    results = [json.loads((run / f"pull{r}.json").read_text()) for r in range(2)]
    assert sorted(r["partid"] for r in results) == [0, 1]
    assert sorted(r["machine_id"] for r in results) == [0, 1]
    for r in results:
        assert r["ntypes"] == g.ntypes
        assert set(r["types"]) == {"paper/feat", "paper/label", "paper/train_mask",
                                   "author/feat"}
        for key, c in r["types"].items():
            nt = key.split("/")[0]
            assert c["rows"] == g.num_nodes(nt) and c["remote_rows"] > 0, (key, c)
            assert c["mismatched"] == 0 and c["orig_ids_complete"], (key, c)
    assert _job_shm(run) == [], "job left shared-memory segments behind"
