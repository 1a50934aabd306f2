"""Sampled radius graphs, domain decomposition plans and the KernelMPNN model (single process)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dsgraph.errors import ConfigError
from dsgraph.physics import sampling
from dsgraph.physics.decompose import bisection, decompose, metis
from dsgraph.physics.halo import make_plan


def _points(n=600, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 2)), rng.standard_normal((n, 3)).astype(np.float32)


def test_radius_edges_cap_radius_and_determinism():
    pos, _ = _points()
    src, dst = sampling.radius_edges(pos, 0.12, 8, np.random.default_rng(1))
    assert len(src) > 0 and np.all(src != dst)
    assert np.all(np.linalg.norm(pos[src] - pos[dst], axis=1) <= 0.12 + 1e-12)
    deg = np.bincount(dst, minlength=len(pos))
    assert deg.max() == 8
    # Nodes with at most 8 neighbours in range keep all of them.
    full_src, full_dst = sampling.radius_edges(pos, 0.12, 10 ** 6, np.random.default_rng(1))
    full_deg = np.bincount(full_dst, minlength=len(pos))
    assert np.array_equal(deg, np.minimum(full_deg, 8))
    assert len(full_src) == 2 * len(np.unique(np.sort(np.stack([full_src, full_dst], 1), 1), axis=0))
    again = sampling.radius_edges(pos, 0.12, 8, np.random.default_rng(1))
    assert np.array_equal(again[0], src) and np.array_equal(again[1], dst)
    other = sampling.radius_edges(pos, 0.12, 8, np.random.default_rng(2))
    assert not np.array_equal(other[0], src)  # the pruning is random, not "nearest first"


def test_edge_features_and_sampled_graph():
    pos, x = _points()
    sg = sampling.sample_graph(pos, x, x[:, 1:], 200, 0.2, 6, np.random.default_rng(3))
    assert sg.num_nodes == 200 and len(np.unique(sg.nodes)) == 200
    assert sg.efeat.shape == (len(sg.src), sampling.edge_feat_dim(2))
    e = 5
    i, j = sg.src[e], sg.dst[e]
    np.testing.assert_allclose(sg.efeat[e, :2], (sg.pos[i] - sg.pos[j]) / 0.2, rtol=1e-5)
    np.testing.assert_allclose(sg.efeat[e, 2], np.linalg.norm(sg.pos[i] - sg.pos[j]) / 0.2, rtol=1e-5)
    np.testing.assert_allclose(sg.efeat[e, 3:5], x[sg.nodes[i], 1:])
    np.testing.assert_allclose(sg.efeat[e, 5:7], x[sg.nodes[j], 1:])
    groups = sampling.cover_groups(1000, 300, np.random.default_rng(0))
    assert sorted(np.concatenate(groups).tolist()) == list(range(1000))


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_bisection_balanced_and_compact(parts):
    pos, _ = _points(601)
    owner = bisection(pos, parts)
    sizes = np.bincount(owner, minlength=parts)
    assert sizes.sum() == 601 and sizes.max() - sizes.min() <= 1
    if parts == 2:  # one straight cut
        axis = int(np.argmax(pos.max(0) - pos.min(0)))
        assert pos[owner == 0, axis].max() <= pos[owner == 1, axis].min()


def test_metis_and_method_errors():
    pos, _ = _points()
    src, dst = sampling.radius_edges(pos, 0.1, 12, np.random.default_rng(0))
    owner = metis(len(pos), src, dst, 4, seed=0)
    assert set(owner.tolist()) == {0, 1, 2, 3}
    cut_metis = np.mean(owner[src] != owner[dst])
    rand = np.random.default_rng(0).integers(0, 4, len(pos))
    assert cut_metis < 0.5 * np.mean(rand[src] != rand[dst])
    with pytest.raises(ConfigError, match="physics.decomposition"):
        decompose(pos, src, dst, 2, "spectral")


def test_plan_halo_is_foreign_in_neighbours():
    pos, _ = _points()
    src, dst = sampling.radius_edges(pos, 0.1, 12, np.random.default_rng(0))
    owner = bisection(pos, 3)
    plans = [make_plan(owner, src, dst, r, 3) for r in range(3)]
    for p in plans:
        mine = owner[dst] == p.rank
        expect = np.unique(src[mine & (owner[src] != p.rank)])
        assert np.array_equal(p.halo, expect)
        assert np.array_equal(p.nodes[p.dst], dst[p.edges]) and np.array_equal(p.nodes[p.src], src[p.edges])
        assert np.all(p.dst < p.num_owned)
        for q, rows in p.recv.items():  # what q sends me, in the same order
            assert np.array_equal(plans[q].nodes[plans[q].send[p.rank].numpy()], p.nodes[rows.numpy()])
    assert sum(len(p.edges) for p in plans) == len(src)


def test_kernel_mpnn_registry_and_shapes():
    import dgl
    from dsgraph.models.registry import build_model

    model = build_model("mpnn", 3, 2, {"edge_feats": 5, "width": 8, "layers": 2, "kernel_hidden": 8})
    g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])), num_nodes=4)
    g.edata["feat"] = torch.randn(3, 5)
    out = model(g, torch.randn(4, 3))
    assert out.shape == (4, 2)
    shared = build_model("mpnn", 3, 2, {"edge_feats": 5, "width": 8, "layers": 4, "shared": True})
    assert len(shared.convs) == 1
    with pytest.raises(ConfigError, match="model.args"):
        build_model("mpnn", 3, 2, {"depth": 3})


def test_local_build_matches_full_graph_and_plans_agree():
    """A worker building only the edges into its own nodes gets exactly the full graph's edges
    into them; near-pair plans send each peer exactly the rows it expects, a superset of the
    rows the kept edges read."""
    pos, x = _points(700)
    nodes = np.random.default_rng(4).choice(700, 400, replace=False)
    full = sampling.build(pos, x, x[:, 1:], nodes, 0.12, 6, np.random.default_rng(5))
    owner = bisection(pos[nodes], 3)
    plans = []
    for r in range(3):
        local = sampling.build(pos, x, x[:, 1:], nodes, 0.12, 6, np.random.default_rng(5),
                               dst_mask=owner == r)
        ref = full.restrict(owner == r)
        for name in ("src", "dst", "efeat", "near_src", "near_dst"):
            assert np.array_equal(getattr(local, name), getattr(ref, name)), name
        plans.append(make_plan(owner, local.src, local.dst, r, 3, near=(local.near_src, local.near_dst)))
    exact = [make_plan(owner, full.src, full.dst, r, 3) for r in range(3)]
    for p, e in zip(plans, exact):
        assert set(e.halo) <= set(p.halo) and np.array_equal(p.nodes[p.src], e.nodes[e.src])
        for q, rows in p.recv.items():
            assert np.array_equal(plans[q].nodes[plans[q].send[p.rank].numpy()], p.nodes[rows.numpy()])


def test_train_epoch_clips_the_gradient_norm(tmp_path):
    """train.grad_clip bounds each update of a DS-MPNN epoch stepped by the trainer's step
    (backward, gradient sum, clip, optimizer): one SGD step (lr 1) moves the parameters by at
    most the clip norm, and by far more without it."""
    from types import SimpleNamespace

    from dsgraph.config import load
    from dsgraph.models.mpnn import KernelMPNN
    from dsgraph.physics import engine
    from dsgraph.physics.fields import FieldData, FieldSet, Normalizer
    from dsgraph.trainer import Trainer
    from dsgraph.modes.dsmpnn import DsmpnnStrategy

    pos, x = _points(300)
    y = (3.0 * x[:, :1] + 1.0).astype(np.float32)
    fs = FieldSet(pos=pos[None], x=x[None], y=y[None], y_raw=y[None])
    data = FieldData("toy", fs, fs, Normalizer(np.zeros(1), np.ones(1)), slice(2, None))
    moved = {}
    for clip in (0.0, 1e-3):
        ph = SimpleNamespace(sampled_nodes=200, radius=0.15, max_edges=8,
                             decomposition="bisection")
        cfg = load(None, ["train.mode=dsmpnn", "dataset.name=darcy", f"train.grad_clip={clip}"])
        torch.manual_seed(0)
        model = KernelMPNN(3, 1, edge_feats=sampling.edge_feat_dim(1), width=8, layers=2,
                           kernel_hidden=8)
        trainer = Trainer(cfg, tmp_path, DsmpnnStrategy(cfg))  # one process: world 1
        trainer.model, trainer.optimizer = model, torch.optim.SGD(model.parameters(), lr=1.0)
        before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
        engine.train_epoch(model, trainer.step, data, ph, 0, 1)
        after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        moved[clip] = float((after - before).norm())
    assert moved[1e-3] <= 1e-3 * (1 + 1e-4)
    assert moved[0.0] > 10 * 1e-3


def test_batched_step_follows_the_mean_gradient_of_its_fields():
    """physics.batch_fields: one step over 3 fields sees the mean of their 3 single-field
    gradients (each field's graph is seeded by (epoch, field), not by the batching)."""
    from types import SimpleNamespace

    from dsgraph.models.mpnn import KernelMPNN
    from dsgraph.physics import engine
    from dsgraph.physics.fields import FieldData, FieldSet, Normalizer

    fields = [_points(300, seed=k) for k in range(3)]
    pos = np.stack([p for p, _ in fields])
    x = np.stack([f for _, f in fields])
    y = (3.0 * x[..., :1] + np.sin(4 * pos[..., :1])).astype(np.float32)
    fs = FieldSet(pos=pos, x=x, y=y, y_raw=y)
    data = FieldData("toy", fs, fs, Normalizer(np.zeros(1), np.ones(1)), slice(2, None))
    torch.manual_seed(0)
    model = KernelMPNN(3, 1, edge_feats=sampling.edge_feat_dim(1), width=8, layers=2,
                       kernel_hidden=8)
    grads: dict[int, list[torch.Tensor]] = {}
    for batch in (1, 3):
        seen = grads[batch] = []

        def step(loss, timers, seen=seen):
            model.zero_grad()
            loss.backward()
            seen.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))

        ph = SimpleNamespace(sampled_nodes=200, radius=0.15, max_edges=8,
                             decomposition="bisection", batch_fields=batch)
        engine.train_epoch(model, step, data, ph, 0, 1)
    assert len(grads[1]) == 3 and len(grads[3]) == 1
    mean = torch.stack(grads[1]).mean(0)
    assert float((grads[3][0] - mean).abs().max()) <= 1e-6 * float(mean.abs().max())
    assert float((grads[1][0] - mean).norm()) > 1e-3 * float(mean.norm())  # fields differ
    assert engine.batches(np.arange(5), 2)[-1].tolist() == [4]
