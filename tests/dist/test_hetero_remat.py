"""Rematerialized relational layers with real DistGraph servers: on blocks sampled from 2
heterogeneous partitions, rows pulled through each type's cache and RPC, RGCN and RGAT give the
plain layers' loss and gradients. ``python -m train`` / ``predict`` with
``sampled.rematerialize`` on a heterograph: tests/dist/test_hetero_train.py (its 2-partition
run)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_hetero_remat import MODELS, compare_hetero
from tests.dist.test_sampled_remat import TOL
from tests.dist.trainer_process import connect, run


def _trainer(run_dir: Path) -> None:
    """Trainer of the job: one typed batch from the servers, plain vs rematerialized."""
    import dgl
    import torch
    import torch.distributed as dist

    from dsgraph.distgraph.features import CachedFeatures
    from dsgraph.models.registry import build_model

    rank, g = connect()
    pb = g.get_partition_book()
    feats = {t: CachedFeatures(g, "feat", t) for t in ("paper", "author")}
    dgl.seed(rank)
    seeds = dgl.distributed.node_split(g.nodes["paper"].data["train_mask"], pb, ntype="paper",
                                       force_even=True)[:48]
    input_nodes, out, blocks = dgl.dataloading.NeighborSampler([6, 4]).sample_blocks(
        g, {"paper": seeds})
    y = g.nodes["paper"].data["label"][out["paper"]]
    table = torch.randn(g.num_nodes("field"), 5, generator=torch.Generator().manual_seed(0),
                        dtype=torch.float64)
    results = {}
    for dtype in ("float64", "float32"):
        dt = getattr(torch, dtype)
        for name, args in MODELS:
            torch.manual_seed(0)
            model = build_model(name, {"paper": 6, "author": 4, "field": 5}, 5,
                                {**args, "dropout": 0.0, "etypes": g.canonical_etypes}).to(dt)
            lerr, gerr, groups = compare_hetero(
                model, blocks, input_nodes,
                {t: (lambda i, f=f: f[i].to(dt)) for t, f in feats.items()},
                {"field": table.to(dt)}, pb.nid2partid, y, dt, 5, own_part=int(pb.partid))
            results[f"{name}{args['hidden']}/{dtype}"] = {
                "loss": lerr, "grad": max(gerr.values()), "groups": groups}
    (run_dir / f"remat{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dgl.distributed.exit_client()


@pytest.mark.timeout(180)
def test_two_partitions_with_distgraph_servers(tmp_path):
    from dsgraph.cluster.dgl_job import run_dgl_job
    from dsgraph.config import ClusterConfig
    from dsgraph.partition import partition_hetero_graph
    from tests.test_hetero_partition import make_graph
    part = partition_hetero_graph(make_graph(), 2, tmp_path / "parts", method="random")
    run = tmp_path / "run"
    run.mkdir()
    run_dgl_job(run, part, ClusterConfig(), "tests.dist.test_hetero_remat", timeout_s=150)
    for r in range(2):
        res = json.loads((run / f"remat{r}.json").read_text())
        assert len(res) == 2 * len(MODELS)
        for key, v in res.items():
            tol = TOL["float32"] if "float32" in key else TOL["float64"]
            assert v["loss"] <= tol and v["grad"] <= tol, (r, key, v)
            # both featured types, rows of both partitions, groups of at most 5 rows
            assert {t for t, _, _ in v["groups"]} == {"paper", "author"}, (key, v)
            assert {p for _, p, _ in v["groups"]} == {0, 1}, (key, v)
            assert max(rows for _, _, rows in v["groups"]) <= 5, (key, v)


if __name__ == "__main__":
    from dsgraph.cluster import dgl_compat

    dgl_compat.apply_from_env()  # process entry point: patch before DGL starts
    run(_trainer)
