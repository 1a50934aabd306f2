"""DS-MPNN domain decomposition: P = 2 and 4 real gloo workers reproduce the P = 1 outputs and
gradients on the same sampled graph, the halo exchange routes gradients back to owners, and a
batched training epoch (``physics.batch_fields``) ends with the same model on 1 and 2 workers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.dist.sar_cases import worker_context

TOL = 1e-5
WIDTH, LAYERS = 8, 3


def _problem(rank: int = 0, world: int = 1, method: str = "bisection"):
    """A small Darcy sample, worker ``rank``'s part of its sampled radius graph (built the way
    training builds it: edges into owned nodes only) and a seeded model (same in every process)."""
    from types import SimpleNamespace

    from dsgraph.data.fields import darcy
    from dsgraph.models.mpnn import KernelMPNN
    from dsgraph.physics import engine, sampling
    from dsgraph.physics.fields import FieldSet

    a, u = darcy.sample(24, seed=5, index=0)
    pos = darcy.grid_positions(24)
    x = np.concatenate([pos, (a.reshape(-1, 1) - 7.5) / 4.5], 1).astype(np.float32)
    y = (u.reshape(-1, 1) / u.max()).astype(np.float32)
    fs = FieldSet(pos=pos[None], x=x[None], y=y[None], y_raw=y[None])
    ph = SimpleNamespace(sampled_nodes=300, radius=0.15, max_edges=10, decomposition=method)
    sg, plan = engine.local_graph(fs, 0, None, ph, slice(2, None), np.random.default_rng(11),
                                  rank, world, seed=0)
    torch.manual_seed(3)
    model = KernelMPNN(in_feats=3, num_classes=1, edge_feats=sampling.edge_feat_dim(1),
                       width=WIDTH, layers=LAYERS, kernel_hidden=16)
    return sg, plan, y[sg.nodes], model


def _run(sg, target, model, plan, exchange_cls=None):
    """Forward/backward on one worker; returns (owned outputs, gradient dict before all-reduce)."""
    from dsgraph.physics import engine, halo

    model.zero_grad()
    pred = engine.local_forward(model, sg, plan, exchange_fn=exchange_cls or halo.HaloExchange)
    engine.local_loss(pred, target, plan).backward()
    return pred[:plan.num_owned].detach()


class _DropGrad(torch.autograd.Function):
    """A broken exchange: correct forward, but backward keeps halo gradients local (drops them)."""

    @staticmethod
    def forward(ctx, h, plan):
        from dsgraph.physics.halo import HaloExchange
        return HaloExchange.forward(ctx, h, plan)

    @staticmethod
    def backward(ctx, grad):
        out = grad.clone()
        out[ctx.plan.num_owned:] = 0
        return out, None


def _worker(rank: int, world: int, port: int, method: str, out_dir: str,
            batched: bool = False) -> None:
    """One gloo rank (``batched``: the batched epoch as well, after the decomposed checks);
    leaves with os._exit (see dsgraph.cluster.worker.exit_now: gloo teardown deadlock)."""
    import traceback

    from dsgraph.cluster.worker import exit_now

    try:
        _worker_body(rank, world, port, method, out_dir, batched)
    except BaseException:
        traceback.print_exc()
        exit_now(1)
    exit_now(0)


def _worker_body(rank: int, world: int, port: int, method: str, out_dir: str,
                 batched: bool) -> None:
    import torch.distributed as dist
    from dsgraph.dist import allreduce_grads
    from dsgraph.physics import halo

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=__import__("datetime").timedelta(seconds=60))
    sg, plan, target, model = _problem(rank, world, method)
    res = {"owned": torch.from_numpy(plan.owned), "nodes": torch.from_numpy(plan.nodes),
           "halo": len(plan.halo)}
    res["out"] = _run(sg, target, model, plan)
    allreduce_grads(model.parameters())
    res["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    _run(sg, target, model, plan, exchange_cls=_DropGrad)
    allreduce_grads(model.parameters())
    res["broken_grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    # Exchange alone: owned rows hold their global id, halo rows hold -1 until exchanged;
    # loss = sum(w * exchanged) with per-rank random weights.
    nodes = torch.from_numpy(plan.nodes).double()
    nodes[plan.num_owned:] = -1.0
    h = torch.stack([nodes, -nodes], 1).requires_grad_(True)
    gen = torch.Generator().manual_seed(100 + rank)
    w = torch.randn(h.shape, generator=gen, dtype=torch.float64)
    ex = halo.HaloExchange.apply(h, plan)
    (ex * w).sum().backward()
    res.update(ex_out=ex.detach(), ex_w=w, ex_grad=h.grad.clone())
    if batched:  # in the same group: a second job of 2 workers would only add process starts
        res["batched"] = _batched_epoch(rank, world)
    torch.save(res, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()


def _spawn(world: int, method: str, out_dir: Path, timeout: float = 90.0,
           batched: bool = False) -> list[dict]:
    from dsgraph.cluster.ports import free_port_range

    ctx = worker_context()
    port = free_port_range(1)
    procs = [ctx.Process(target=_worker, args=(r, world, port, method, str(out_dir), batched))
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout)
        codes = [p.exitcode for p in procs]
        assert codes == [0] * world, f"worker exit codes {codes}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(world)]


def _reference():
    sg, plan, target, model = _problem()
    out = _run(sg, target, model, plan)
    return sg, out, {n: p.grad.clone() for n, p in model.named_parameters()}


def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest elementwise difference, relative to the reference's scale (at least 1)."""
    return float((a - b).abs().max() / max(1.0, float(b.abs().max())))


def _norm_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b||."""
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> list[dict]:
    """The 2-worker (bisection) job's results, decomposed checks and batched epoch."""
    return _spawn(2, "bisection", tmp_path_factory.mktemp("two_workers"), batched=True)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world,method", [(2, "bisection"), (4, "metis")])
def test_decomposed_matches_single_worker(tmp_path, world, method, request):
    sg, ref_out, ref_grads = _reference()
    results = (request.getfixturevalue("two_workers") if world == 2
               else _spawn(world, method, tmp_path))

    # Every sampled node is owned exactly once and the subdomains really need halos.
    owned = torch.cat([r["owned"] for r in results])
    assert sorted(owned.tolist()) == list(range(sg.num_nodes))
    assert all(r["halo"] > 0 for r in results)

    out = torch.zeros_like(ref_out)
    for r in results:
        out[r["owned"]] = r["out"]
    assert _max_rel(out, ref_out) < TOL
    for name, g in ref_grads.items():
        assert float(g.abs().max()) > 0, name
        for r in results:  # all-reduced: identical on every worker
            assert _max_rel(r["grads"][name], g) < TOL, (name, _max_rel(r["grads"][name], g))

    # The same check catches an exchange that drops the halo gradients in backward.
    worst = max(_norm_rel(results[0]["broken_grads"][n], g) for n, g in ref_grads.items())
    assert worst > 1e-2, worst

    # Exchange alone: halo rows get the owner's value; owners receive the halo rows' gradients.
    expected = torch.zeros(sg.num_nodes, 2, dtype=torch.float64)
    for r in results:
        nodes = r["nodes"]
        assert torch.equal(r["ex_out"][:, 0], nodes.double())  # halo rows filled by owners
        expected.index_add_(0, nodes, r["ex_w"])
    for r in results:
        n_own = len(r["owned"])
        assert torch.allclose(r["ex_grad"][:n_own], expected[r["owned"]])
        assert torch.all(r["ex_grad"][n_own:] == 0)


# --- batched training: one epoch of 3 fields in batches of 2, 1 worker vs 2 ------------------

BATCH_PH = dict(sampled_nodes=250, radius=0.15, max_edges=10, decomposition="bisection",
                batch_fields=2)


def _batched_epoch(rank: int = 0, world: int = 1) -> dict:
    """Train one epoch (two Adam steps: fields {a, b}, then {c}) on this worker; return the
    parameters after it, the epoch's mean loss and the losses each step saw."""
    from types import SimpleNamespace

    from dsgraph.data.fields import darcy
    from dsgraph.dist import allreduce_grads
    from dsgraph.models.mpnn import KernelMPNN
    from dsgraph.physics import engine, sampling
    from dsgraph.physics.fields import FieldData, FieldSet, Normalizer

    samples = [darcy.sample(24, seed=5, index=i) for i in range(3)]
    pos = np.broadcast_to(darcy.grid_positions(24), (3, 576, 2))
    a = np.stack([s[0].reshape(-1, 1) for s in samples])
    u = np.stack([s[1].reshape(-1, 1) for s in samples])
    x = np.concatenate([pos, (a - 7.5) / 4.5], 2).astype(np.float32)
    y = (u / u.max()).astype(np.float32)
    fs = FieldSet(pos=pos, x=x, y=y, y_raw=y)
    data = FieldData("darcy", fs, fs, Normalizer(np.zeros(1), np.ones(1)), slice(2, None))
    torch.manual_seed(3)
    model = KernelMPNN(in_feats=3, num_classes=1, edge_feats=sampling.edge_feat_dim(1),
                       width=WIDTH, layers=LAYERS, kernel_hidden=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    seen = []

    def step(loss, timers):
        opt.zero_grad()
        loss.backward()
        allreduce_grads(model.parameters())
        seen.append(float(loss))
        opt.step()

    mean = engine.train_epoch(model, step, data, SimpleNamespace(**BATCH_PH), seed=0, epoch=1,
                              rank=rank, world=world)
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "loss": mean, "steps": seen}


@pytest.mark.timeout(180)
def test_batched_epoch_same_model_on_one_and_two_workers(two_workers):
    ref = _batched_epoch()
    assert len(ref["steps"]) == 2  # 3 fields in batches of 2: two optimizer steps
    results = [r["batched"] for r in two_workers]
    for r in results:
        # Each worker's loss is its share; the epoch mean is summed over workers.
        assert r["loss"] == pytest.approx(ref["loss"], rel=TOL)
        assert len(r["steps"]) == 2
        for name, p in ref["params"].items():
            assert _max_rel(r["params"][name], p) < TOL, (name, _max_rel(r["params"][name], p))
    assert sum(r["steps"][0] for r in results) == pytest.approx(ref["steps"][0], rel=TOL)
