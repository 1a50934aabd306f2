"""SAR link prediction (``train.mode: sar``, ``task.name: link_prediction``).

Exactness: on 2 METIS and 3 very uneven parts of a directed random graph (edges in one
direction, both, self-loops, nodes without in-edges), real gloo workers compute the loss of
their positives (:func:`dsgraph.modes.sar.links.training_pairs`: every undirected pair of the
graph once over all workers) and drawn negatives through the differentiable row fetch, in rounds of
positives (one, or many and unequal per worker); in float64 the total loss and every gradient
(model and decoder) equal a single-process DGL reference on the whole graph with the same pairs
within 1e-9 (relative). End to end: ``python -m partition`` + ``python -m train --set
train.mode=sar`` learns (GCN's validation MRR well above the MLP's), its validation MRR and
Hits@K equal those recomputed from the exported embeddings and the sampled strategy's held-out
negatives, and ``python -m predict`` exports embeddings and pair scores.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from dsgraph import checkpoint, dist
from dsgraph import config as cfgmod
from dsgraph.config.sections import TaskConfig
from dsgraph.distgraph.link_evaluate import held_out_edges
from dsgraph.models.registry import build_model
from dsgraph.tasks.link_prediction import (LinkPrediction, hits_threshold, make_decoder,
                                           reciprocal_ranks)
from tests.dist import jobs
from tests.dist import sar_cases as harness
from tests.dist.test_sar_grad import make_graph

WIDTH, NEGATIVES = 8, 3
# ``chunk``: positives per round of dsgraph.modes.sar.links.link_loss (one round; many, unequal
# counts of non-empty rounds per worker; a few)
CASES = [dict(model="gcn", args={"hidden": WIDTH}, mode="sar", loss="bce", decoder="dot",
              chunk=10 ** 6),
         dict(model="sage", args={"hidden": WIDTH}, mode="one_shot", loss="contrastive",
              decoder="distmult", chunk=7),
         dict(model="gat", args={"hidden": 4, "heads": 2}, mode="sar", loss="bce",
              decoder="distmult", chunk=50)]
TOL = 1e-9


def build(case: dict, in_feats: int, seed: int = 0):
    """The case's float64 model with its decoder; DistMult's relation moved off all-ones so
    its gradient is not the dot product's."""
    torch.manual_seed(seed)
    model = build_model(case["model"], in_feats, WIDTH, dict(case["args"])).double()
    model.link_decoder = make_decoder(case["decoder"], WIDTH).double()
    for p in model.link_decoder.parameters():
        p.data += 0.3 * torch.randn(p.shape, dtype=p.dtype)
    return model


def task_of(case: dict):
    """The case's LinkPrediction task."""
    return LinkPrediction(TaskConfig(name="link_prediction", loss=case["loss"],
                                     negatives=NEGATIVES))


def link_worker(rank: int, world: int, port: int, part_json: str, out_dir: str) -> None:
    """One gloo rank: every case's loss share and summed gradients on this rank's part, with
    its positives and negatives in original ids; ``out_dir/rank<r>.pt``."""
    import faulthandler
    import traceback

    from dsgraph.cluster.worker import exit_now
    faulthandler.dump_traceback_later(harness.WORKER_TIMEOUT_S, exit=True)
    try:
        _link_worker_body(rank, world, port, part_json, out_dir)
    except BaseException:  # noqa: BLE001 - a failed rank must end with a non-zero code
        traceback.print_exc()
        exit_now(1)
    exit_now(0)


def _link_worker_body(rank: int, world: int, port: int, part_json: str, out_dir: str) -> None:
    from dsgraph.cluster.worker import init_process_group
    from dsgraph.sar.model import prepare_model
    from dsgraph.sar.worker import setup_worker
    from dsgraph.modes.sar.links import link_loss, training_pairs

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    init_process_group(timeout_s=120)
    w = setup_worker(part_json, rank, world)
    orig = torch.cat(dist.gather_values(w.part.ndata["orig_id"].to(torch.int64)))
    x = w.part.ndata["feat"].double()
    pos = training_pairs(w.part, w.comm)
    gen = torch.Generator().manual_seed(checkpoint.epoch_seed(0, 1, rank))
    neg = torch.randint(0, w.part.num_global, (len(pos), NEGATIVES), generator=gen)
    positives = int(dist.all_sum([float(len(pos))])[0])
    results = []
    for case in CASES:
        w.set_mode(case["mode"])
        model = prepare_model(build(case, x.shape[1]))
        dist.broadcast_module(model)
        task = task_of(case)
        sent0 = w.comm.bytes_sent
        h = model(w.graph, x)
        stand_in, loss = link_loss(task, model.link_decoder, h, pos, neg, w.part.node_ranges,
                                   w.comm, task.loss_count(positives, NEGATIVES), case["chunk"])
        stand_in.backward()
        dist.allreduce_grads(model.parameters())
        results.append({"loss": loss, "bytes_sent": w.comm.bytes_sent - sent0,
                        "grads": {n: p.grad.clone() for n, p in model.named_parameters()}})
    own = w.part.ndata["orig_id"]
    torch.save({"cases": results, "pos": orig[pos], "neg": orig[neg], "own": own},
               os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()


def reference(g, case: dict, pos: torch.Tensor, neg: torch.Tensor, positives: int) -> dict:
    """The case on the whole graph in one process: plain DGL, the same pairs."""
    model = build(case, g.ndata["feat"].shape[1])
    task = task_of(case)
    h = model(g, g.ndata["feat"].double())
    dec = model.link_decoder
    hs = h[pos[:, 0]]
    hn = h[neg.reshape(-1)].reshape(*neg.shape, -1)
    loss = task.edge_loss(dec(hs, h[pos[:, 1]]), dec(hs.unsqueeze(1).expand_as(hn), hn),
                          "sum") / task.loss_count(positives, NEGATIVES)
    loss.backward()
    return {"loss": loss.item(), "grads": {n: p.grad for n, p in model.named_parameters()}}


def check_exact(g, part_json, world: int, tmp_path) -> None:
    harness.spawn(link_worker, world, (str(part_json), str(tmp_path)))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    # positives: every undirected non-loop pair of g exactly once, each on its source's owner
    s, d = (t.numpy() for t in g.edges())
    keep = s != d
    want = {(min(a, b), max(a, b)) for a, b in zip(s[keep].tolist(), d[keep].tolist())}
    got = [(min(a, b), max(a, b)) for r in ranks for a, b in r["pos"].tolist()]
    assert len(got) == len(set(got)) and set(got) == want, (len(got), len(want))
    for r in ranks:
        assert set(r["pos"][:, 0].tolist()) <= set(r["own"].tolist())
    pos, neg = torch.cat([r["pos"] for r in ranks]), torch.cat([r["neg"] for r in ranks])
    for i, case in enumerate(CASES):
        ref = reference(g, case, pos, neg, len(pos))
        total = sum(r["cases"][i]["loss"] for r in ranks)
        assert abs(total - ref["loss"]) <= TOL * abs(ref["loss"]), (case, total, ref["loss"])
        assert set(ref["grads"]) >= {"link_decoder.relation"} or case["decoder"] == "dot"
        for r in ranks:  # summed gradients: identical on every worker, equal to the reference
            assert harness.max_rel_err(r["cases"][i]["grads"], ref["grads"]) <= TOL, case
        for name, t in ref["grads"].items():
            assert t.abs().max() > 0, (case, name)
        assert min(r["cases"][i]["bytes_sent"] for r in ranks) > 0, case  # rows did move


@pytest.mark.timeout(120)
def test_two_metis_parts_equal_single_process(tmp_path):
    from dsgraph.partition import partition_graph
    g = make_graph(120, seed=3)
    part_json = partition_graph(g, 2, tmp_path / "parts", method="metis")
    check_exact(g, part_json, 2, tmp_path)


@pytest.mark.timeout(120)
def test_three_uneven_parts_equal_single_process(tmp_path):
    from dsgraph.partition import write_partitions
    sizes = [80, 25, 10]
    g = make_graph(sum(sizes), seed=5)
    part_json = write_partitions(g, np.repeat(np.arange(3), sizes), tmp_path / "parts", "graph")
    check_exact(g, part_json, 3, tmp_path)


@pytest.mark.timeout(240)
def test_sar_link_prediction_trains_and_predicts(tmp_path):
    cfg = tmp_path / "link.yaml"
    cfg.write_text((jobs.ROOT / "configs" / "link_prediction.yaml").read_text())
    sets = (f"dataset.cache_dir={tmp_path}/data", f"partition.out_dir={tmp_path}/parts",
            "dataset.num_nodes=2000", "task.edge_split=[0.8, 0.1, 0.1]", "task.negatives=2",
            "task.eval_negatives=50", "task.hits_k=20", "task.hits_negatives=500",
            "model.args={hidden: 32, num_layers: 2}", "train.timeout_s=150")
    jobs.partition(cfg, *sets)
    run, mlp = tmp_path / "gcn", tmp_path / "mlp"
    sar = ("train.mode=sar", "train.epochs=12", "task.decoder=distmult")
    jobs.train(cfg, run, *sets, *sar)
    jobs.train(cfg, mlp, *sets, *sar, "model.name=mlp", "train.eval_every=12")
    records, summary, baseline = jobs.epochs(run), jobs.summary(run), jobs.summary(mlp)
    assert summary["mode"] == "sar" and summary["num_workers"] == 2
    assert all(r["bytes_sent"] > 0 for r in records)
    for key in ("val_mrr", "test_mrr", "val_hits20", "test_hits20"):
        assert 0 < summary[key] <= 1, summary
    print(f"sar gcn val_mrr by epoch {[round(r['val_mrr'], 3) for r in records]}; "
          f"mlp val_mrr {baseline['val_mrr']:.3f}")
    assert records[-1]["loss"] < records[0]["loss"], records
    assert summary["val_mrr"] > records[0]["val_mrr"] + 0.03, records
    assert summary["val_mrr"] > baseline["val_mrr"] + 0.15, (summary, baseline)
    # python -m predict: one embedding per node by original id; --pairs: the decoder's scores
    jobs.predict(run)
    with np.load(run / "predictions.npz") as data:
        assert set(data) == {"node_id", "embedding"}
        assert np.array_equal(data["node_id"], np.arange(2000))
        emb = data["embedding"]
    assert emb.shape == (2000, 32)
    relation = checkpoint.read(run / "best.pt")["model"]["link_decoder.relation"].numpy()
    assert not np.allclose(relation, 1.0)  # the decoder trained and was checkpointed
    # the run's validation figures, recomputed here from the exported embeddings of the same
    # (best) model and the sampled strategy's held-out edges and negatives
    conf = cfgmod.load(str(cfg), list(sets) + list(sar))
    val = held_out_edges(tmp_path / "parts" / "link_split.npz", 2000, conf.task,
                         conf.dataset.seed, 0, 1)["val"]
    dst = np.concatenate([val.pos[:, 1:].numpy(), val.neg_dst.numpy()], 1)
    scores = (emb[val.pos[:, 0].numpy()][:, None, :] * relation * emb[dst]).sum(-1)
    hits = val.hits_pairs.numpy()
    threshold = hits_threshold((emb[hits[:, 0]] * relation * emb[hits[:, 1]]).sum(-1), 20)
    assert abs(reciprocal_ranks(scores).mean() - summary["val_mrr"]) < 1e-6, summary
    assert abs((scores[:, 0] > threshold).mean() - summary["val_hits20"]) < 1e-6, summary
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("src,dst\n0,1\n5,1999\n42,42\n1999,0\n")
    jobs.predict(run, "--pairs", str(pairs), "--out", str(tmp_path / "scores.csv"))
    import pandas as pd
    scores = pd.read_csv(tmp_path / "scores.csv")
    asked = [[0, 1], [5, 1999], [42, 42], [1999, 0]]
    assert scores[["src", "dst"]].values.tolist() == asked
    expected = [(emb[u] * relation * emb[v]).sum() for u, v in asked]
    assert np.allclose(scores["score"], expected, rtol=1e-4, atol=1e-4)
    assert np.allclose(scores["prob"], 1 / (1 + np.exp(-scores["score"])), atol=1e-6)
