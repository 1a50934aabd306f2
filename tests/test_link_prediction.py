"""Link prediction pieces: the edge split (seeded, disjoint, no leakage into any partition),
the decoders, MRR and Hits@K against hand computations, the pair-excluding sampler, config."""
from __future__ import annotations

import json
import re

import dgl
import numpy as np
import pytest
import torch

from dsgraph import config as cfgmod
from dsgraph.config import DatasetConfig, TaskConfig
from dsgraph.data.link_split import check_no_leak, pair_keys, split_edges
from dsgraph.data.synthetic import generate
from dsgraph.distgraph.link_evaluate import eval_negatives, rank_share, shared_negatives
from dsgraph.distgraph.link_sampler import PairExcludingSampler, edge_batch
from dsgraph.errors import ConfigError, DataError
from dsgraph.partition import partition_graph
from dsgraph.partition.integrity import verify_files
from dsgraph.partition.meta import read_meta
from dsgraph.tasks.link_prediction import (DistMultDecoder, DotDecoder, LinkPrediction,
                                           hits_threshold, make_decoder, reciprocal_ranks)


@pytest.fixture(scope="module")
def graph() -> dgl.DGLGraph:
    return generate(DatasetConfig(num_nodes=600, avg_degree=8.0, num_classes=4, feat_dim=8,
                                  seed=3))


def _pairs_of(g: dgl.DGLGraph) -> set[tuple[int, int]]:
    src, dst = (t.tolist() for t in g.edges())
    return {(min(a, b), max(a, b)) for a, b in zip(src, dst) if a != b}


def test_split_is_seeded_disjoint_and_complete(graph):
    g1, s1 = split_edges(graph, [0.8, 0.1, 0.1], seed=5)
    g2, s2 = split_edges(graph, [0.8, 0.1, 0.1], seed=5)
    _, s3 = split_edges(graph, [0.8, 0.1, 0.1], seed=6)
    for name in ("train", "val", "test"):
        assert np.array_equal(s1[name], s2[name])
        assert (s1[name][:, 0] < s1[name][:, 1]).all()
    assert not np.array_equal(s1["val"], s3["val"])
    sets = {k: {tuple(p) for p in v.tolist()} for k, v in s1.items()}
    assert not (sets["train"] & sets["val"] or sets["train"] & sets["test"]
                or sets["val"] & sets["test"])
    every = _pairs_of(graph)
    assert sets["train"] | sets["val"] | sets["test"] == every
    assert len(sets["val"]) == round(0.1 * len(every)) == len(sets["test"])
    # the graph keeps exactly the training pairs, both directions, and its node data
    assert _pairs_of(g1) == sets["train"]
    assert g1.num_edges() == 2 * len(sets["train"])
    assert check_no_leak(g1, s1["val"]) == 0 and check_no_leak(g1, s1["test"]) == 0
    assert check_no_leak(graph, s1["val"]) == 2 * len(sets["val"])  # the check can fail
    assert torch.equal(g1.ndata["feat"], graph.ndata["feat"])


def test_split_with_a_rest_drops_it_and_refuses_empty_splits(graph):
    g, s = split_edges(graph, [0.5, 0.1, 0.1], seed=0)
    assert _pairs_of(g) == {tuple(p) for p in s["train"].tolist()}
    assert len(s["train"]) == round(0.5 * len(_pairs_of(graph)))
    tiny = dgl.graph(([0, 1, 1, 2], [1, 0, 2, 1]), num_nodes=3)
    with pytest.raises(DataError, match=r"task.edge_split: .* leaves a split without edges"):
        split_edges(tiny, [0.8, 0.1, 0.1], seed=0)


def test_no_held_out_edge_in_any_partition(graph, tmp_path):
    g, split = split_edges(graph, [0.8, 0.1, 0.1], seed=1)
    path = partition_graph(g, 2, tmp_path / "parts", method="metis", link_split=split)
    meta = read_meta(path)
    assert meta["link_split"] == "link_split.npz" and "link_split.npz" in meta["dsgraph"]["files"]
    held = np.concatenate([split["val"], split["test"]])
    n = g.num_nodes()
    seen = 0
    for k in range(2):
        part = dgl.load_graphs(str(tmp_path / "parts" / f"part{k}" / "graph.dgl"))[0][0]
        feats = dgl.data.utils.load_tensors(str(tmp_path / "parts" / f"part{k}" /
                                                "node_feat.dgl"))
        seen += len(feats["_N/orig_id"])
        # local -> partitioned id -> original id, over every part's owned nodes
        orig = np.concatenate([dgl.data.utils.load_tensors(
            str(tmp_path / "parts" / f"part{j}" / "node_feat.dgl"))["_N/orig_id"].numpy()
            for j in range(2)])
        src, dst = (t.numpy() for t in part.edges())
        gid = part.ndata[dgl.NID].numpy()
        keys = pair_keys(orig[gid[src]], orig[gid[dst]], n)
        assert part.num_edges() > 0
        assert not np.isin(keys, pair_keys(held[:, 0], held[:, 1], n)).any()
        assert np.isin(keys, pair_keys(split["train"][:, 0], split["train"][:, 1], n)).all()
    assert seen == n
    with np.load(tmp_path / "parts" / "link_split.npz") as stored:
        assert all(np.array_equal(stored[k], split[k]) for k in ("train", "val", "test"))
    verify_files(path, meta)
    (tmp_path / "parts" / "link_split.npz").write_bytes(b"garbage")
    with pytest.raises(DataError, match="link_split.npz"):
        verify_files(path, meta)


def test_decoders():
    hu, hv = torch.tensor([[1.0, 2.0], [0.5, -1.0]]), torch.tensor([[3.0, 1.0], [2.0, 2.0]])
    assert torch.allclose(DotDecoder()(hu, hv), torch.tensor([5.0, -1.0]))
    dm = make_decoder("distmult", 2)
    assert isinstance(dm, DistMultDecoder) and isinstance(make_decoder("dot", 2), DotDecoder)
    assert torch.allclose(dm(hu, hv), torch.tensor([5.0, -1.0]))  # r = 1 at start
    with torch.no_grad():
        dm.relation.copy_(torch.tensor([2.0, -1.0]))
    assert torch.allclose(dm(hu, hv), torch.tensor([1 * 3 * 2 - 2 * 1, 0.5 * 2 * 2 + 2.0]))
    assert len(list(dm.parameters())) == 1 and not list(DotDecoder().parameters())


def test_mrr_and_hits_against_hand_computation():
    # positive first, then its negatives
    scores = np.array([[0.9, 0.1, 0.2, 0.3],    # rank 1
                       [0.5, 0.7, 0.1, 0.6],    # rank 3
                       [0.4, 0.4, 0.1, 0.0],    # a tie: ranks 1 and 2 -> 1.5
                       [0.0, 0.5, 0.6, 0.7]])   # rank 4
    assert np.allclose(reciprocal_ranks(scores), [1, 1 / 3, 1 / 1.5, 1 / 4])
    shared = np.array([0.1, 0.8, 0.3, 0.45, 0.2])
    assert hits_threshold(shared, 2) == 0.45 and hits_threshold(shared, 6) == float("-inf")
    task = LinkPrediction(TaskConfig(name="link_prediction", hits_k=2))
    task.bind(8)
    threshold = torch.full((4,), hits_threshold(shared, 2), dtype=torch.float64)
    sums = task.metric_sums(torch.tensor(scores), threshold)
    assert sums[0] == 4 and sums[2] == 2  # 0.9 and 0.5 beat 0.45; 0.4 and 0.0 do not
    figures = task.metrics(sums, "val")
    assert figures["val_mrr"] == pytest.approx((1 + 1 / 3 + 1 / 1.5 + 1 / 4) / 4)
    assert figures["val_hits2"] == pytest.approx(2 / 4)
    # sums add over ranks: two halves give the whole
    a = task.metric_sums(torch.tensor(scores[:2]), threshold[:2])
    b = task.metric_sums(torch.tensor(scores[2:]), threshold[2:])
    assert [x + y for x, y in zip(a, b)] == pytest.approx(sums)
    assert task.metrics([0, 0, 0], "test") == {"test_mrr": None, "test_hits2": None}
    assert LinkPrediction.selection_metric == "val_mrr" and not LinkPrediction.lower_is_better


def test_loss_is_bce_and_outputs_sorted_embeddings():
    task = LinkPrediction()
    out, y = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([1.0, 0.0, 0.0])
    expected = -(np.log(1 / (1 + np.exp(-2.0))) + np.log(1 - 1 / (1 + np.exp(1.0)))
                 + np.log(1 - 1 / (1 + np.exp(-0.5)))) / 3
    assert task.loss(out, y).item() == pytest.approx(expected, rel=1e-6)
    assert task.loss(out, y, "sum").item() == pytest.approx(3 * expected, rel=1e-6)
    cols = task.outputs(torch.tensor([[1.0, 1.0], [2.0, 2.0]]), {"node_id": np.array([7, 3])})
    assert cols["node_id"].tolist() == [3, 7] and cols["embedding"][0].tolist() == [2.0, 2.0]


def test_eval_negatives_fixed_and_shared_over_ranks():
    pairs = np.zeros((10, 2), dtype=np.int64)
    assert np.array_equal(eval_negatives(pairs, 50, 7, 0), eval_negatives(pairs, 50, 7, 0))
    assert eval_negatives(pairs, 50, 7, 0).shape == (10, 7)
    assert not np.array_equal(eval_negatives(pairs, 50, 7, 0), eval_negatives(pairs, 50, 7, 1))
    assert shared_negatives(50, 20, 0).shape == (20, 2)
    rows = np.arange(10)
    shares = [rank_share(rows, r, 3) for r in range(3)]
    assert sorted(np.concatenate(shares).tolist()) == rows.tolist()


def test_sampler_leaves_out_the_batch_edges_both_ways(graph):
    g = dgl.graph(graph.edges(), num_nodes=graph.num_nodes())
    eids = torch.arange(0, 200)
    src, dst = g.find_edges(eids)
    batch = edge_batch(g, PairExcludingSampler([50, 50]), src, dst, 3,
                       torch.Generator().manual_seed(0))
    banned = set(pair_keys(src.numpy(), dst.numpy(), g.num_nodes()).tolist())
    sampled = 0
    for block in batch.blocks:
        s, d = block.edges()
        s, d = block.srcdata[dgl.NID][s].numpy(), block.dstdata[dgl.NID][d].numpy()
        assert not banned & set(pair_keys(s, d, g.num_nodes()).tolist())
        sampled += len(s)
    assert sampled > 0
    # without exclusion the same neighbourhoods do hold them (the check can fail)
    _, _, blocks = PairExcludingSampler([50, 50]).sample_pairs(g, batch.seeds, None)
    s, d = blocks[-1].edges()
    keys = pair_keys(blocks[-1].srcdata[dgl.NID][s].numpy(),
                     blocks[-1].dstdata[dgl.NID][d].numpy(), g.num_nodes())
    assert banned & set(keys.tolist())
    # positives and negatives index the seeds: endpoints as drawn
    assert torch.equal(batch.seeds[batch.pos[:, 0]], src)
    assert torch.equal(batch.seeds[batch.pos[:, 1]], dst)
    assert batch.neg_dst.shape == (200, 3)


@pytest.mark.parametrize("kind, k, shape", [("uniform", 3, (40, 3)), ("joint", 5, (40, 5)),
                                            ("in_batch", 3, (40, 39))])
@pytest.mark.parametrize("decoder", ["dot", "distmult"])
def test_batch_scores_pair_each_source_with_its_negatives(graph, kind, k, shape, decoder):
    g = dgl.graph(graph.edges(), num_nodes=graph.num_nodes())
    eids = torch.arange(100, 140)
    src, dst = g.find_edges(eids)
    batch = edge_batch(g, PairExcludingSampler([5]), src, dst, k,
                       torch.Generator().manual_seed(1), kind)
    h = torch.randn(len(batch.seeds), 6, dtype=torch.float64)
    dec = make_decoder(decoder, 6).double()
    if decoder == "distmult":
        with torch.no_grad():
            dec.relation.uniform_(0.5, 2.0)
    pos, neg = batch.scores(h, dec)
    row_of = {int(n): i for i, n in enumerate(batch.seeds)}
    emb = {int(n): h[i] for n, i in row_of.items()}
    expect = torch.stack([dec(emb[int(u)], emb[int(v)]) for u, v in zip(src, dst)])
    assert torch.allclose(pos, expect) and neg.shape == shape
    # every negative score is the positive's source against a destination of the kind's rule
    if kind == "in_batch":
        others = [[int(dst[j]) for j in range(40) if j != i] for i in range(40)]
    elif kind == "joint":
        shared = [int(batch.seeds[r]) for r in batch.neg_dst]
        assert len(batch.neg_dst) == k
        others = [shared] * 40
    else:
        others = [[int(batch.seeds[r]) for r in row] for row in batch.neg_dst]
    want = torch.tensor([[float(dec(emb[int(u)], emb[v])) for v in row]
                         for u, row in zip(src, others)], dtype=torch.float64)
    assert torch.allclose(neg, want)


def test_edge_losses_against_hand_computations():
    pos = torch.tensor([2.0, -1.0])
    neg = torch.tensor([[0.5, 1.0, -2.0], [3.0, 0.0, 0.0]])
    bce = LinkPrediction(TaskConfig(name="link_prediction"))
    sig = torch.sigmoid
    want = -(torch.log(sig(pos)).sum() + torch.log(1 - sig(neg)).sum()) / 8
    assert torch.allclose(bce.edge_loss(pos, neg), want)
    assert torch.allclose(bce.edge_loss(pos, neg, "sum"), want * 8)
    assert bce.loss_count(2, 3) == 8
    nce = LinkPrediction(TaskConfig(name="link_prediction", loss="contrastive"))
    rows = torch.cat([pos.unsqueeze(1), neg], 1)
    want = -(pos - torch.logsumexp(rows, 1)).mean()
    assert torch.allclose(nce.edge_loss(pos, neg), want)
    assert nce.loss_count(2, 3) == 2


@pytest.mark.parametrize("sets, message", [
    (["task.name=link_prediction", "train.mode=sar", "task.negative_sampler=joint"],
     "task.negative_sampler: 'joint' needs mini-batches"),
    (["task.loss=contrastive"],
     "task.loss: only task 'link_prediction' reads it"),
    (["task.decoder=distmult"],
     "task.decoder: only task 'link_prediction' reads it; remove it or set task.name, got "
     "'distmult'"),
    (["task.name=link_prediction", "task.edge_split=[0.9, 0.1, 0.0]"],
     r"task.edge_split: expected \[train, val, test\] fractions of the edges, each > 0, "
     r"summing to <= 1, got \[0.9, 0.1, 0.0\]"),
    (["task.name=link_prediction", "cluster.samplers_per_trainer=1"],
     "cluster.samplers_per_trainer: task 'link_prediction' samples in the trainer"),
])
def test_config_errors(sets, message):
    with pytest.raises(ConfigError, match=message):
        cfgmod.load(None, sets)


def test_partition_source_records_the_edge_split():
    from dsgraph.partition.meta import partition_source
    cfg = cfgmod.load(None, ["task.name=link_prediction", "task.edge_split=[0.7, 0.1, 0.2]"])
    assert partition_source(cfg)["task"] == {"name": "link_prediction",
                                             "edge_split": [0.7, 0.1, 0.2]}
    assert "task" not in partition_source(cfgmod.load(None))
    json.dumps(partition_source(cfg))


def test_read_pairs_checks_the_csv(tmp_path):
    from dsgraph.errors import UserError
    from dsgraph.predict.pairs import read_pairs
    good = tmp_path / "p.csv"
    good.write_text("src,dst\n0,5\n7,3\n")
    assert read_pairs(good, 10).tolist() == [[0, 5], [7, 3]]
    cases = {"src,x\n0,1\n": "expected columns src and dst, missing dst",
             "src,dst\n0,10\n": "row 2: dst 10 is not a node id (expected 0..9)",
             "src,dst\n0.5,1\n": "expected integer node ids",
             "src,dst\n": "expected at least one pair"}
    for text, message in cases.items():
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(UserError, match=re.escape(message)):
            read_pairs(bad, 10)
    with pytest.raises(UserError, match="file not found"):
        read_pairs(tmp_path / "missing.csv", 10)
