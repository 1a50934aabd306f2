"""DS-MPNN steps shared by the trainer, tests and benchmark: decomposed forward, training epoch
and full-field inference (the loss and metrics: :mod:`dsgraph.tasks.regression`). Works for one
worker (no torch.distributed needed) or many."""
from __future__ import annotations

import time
from typing import Callable

import dgl
import numpy as np
import torch

from dsgraph import dist
from dsgraph.physics import sampling
from dsgraph.physics.decompose import bisection, decompose
from dsgraph.physics.fields import FieldData, FieldSet
from dsgraph.physics.halo import HaloExchange, LocalPlan, exchange, make_plan
from dsgraph.tasks import Task
from dsgraph.tasks.regression import FieldRegression

FIELD_REGRESSION = FieldRegression()  # DS-MPNN's task unless a strategy passes its own


def local_graph(fs: FieldSet, i: int, nodes: np.ndarray | None, ph, coef_cols: slice,
                rng: np.random.Generator, rank: int = 0, world: int = 1,
                seed: int = 0) -> tuple[sampling.SampledGraph, LocalPlan]:
    """Worker ``rank``'s part of the capped radius graph of sample ``i`` over ``nodes`` (None:
    draw ``ph.sampled_nodes``) and its halo plan.

    Every worker draws the same nodes and cap seed from ``rng``. With coordinate bisection the
    owners follow from the positions alone, so each worker builds only the edges into its own
    nodes; METIS needs the whole graph first.
    """
    x = fs.x[i]
    if nodes is None:
        nodes = sampling.sample_nodes(len(x), ph.sampled_nodes, rng)
    pos, coef = fs.pos[i], x[:, coef_cols]
    if world == 1:
        sg = sampling.build(pos, x, coef, nodes, ph.radius, ph.max_edges, rng)
        owner = np.zeros(len(nodes), dtype=np.int64)
    elif ph.decomposition == "bisection":
        owner = bisection(pos[nodes].astype(np.float64), world)
        sg = sampling.build(pos, x, coef, nodes, ph.radius, ph.max_edges, rng,
                            dst_mask=owner == rank)
    else:
        sg = sampling.build(pos, x, coef, nodes, ph.radius, ph.max_edges, rng)
        owner = decompose(sg.pos, sg.src, sg.dst, world, ph.decomposition, seed)
        sg = sg.restrict(owner == rank)
    return sg, make_plan(owner, sg.src, sg.dst, rank, world, near=(sg.near_src, sg.near_dst))


def local_forward(model: torch.nn.Module, sg: sampling.SampledGraph, plan: LocalPlan,
                  dtype: torch.dtype = torch.float32,
                  exchange_fn: type[torch.autograd.Function] = HaloExchange) -> torch.Tensor:
    """Model output on this worker's local rows (owned first, then halo: only owned are valid)."""
    nodes = plan.nodes
    g = dgl.graph((torch.from_numpy(plan.src), torch.from_numpy(plan.dst)), num_nodes=len(nodes))
    x = torch.from_numpy(sg.x[nodes]).to(dtype)
    ef = torch.from_numpy(sg.efeat[plan.edges]).to(dtype)
    return model(g, x, ef, exchange=exchange(plan, exchange_fn))


def local_loss(pred: torch.Tensor, target: np.ndarray, plan: LocalPlan,
               task: Task = FIELD_REGRESSION) -> torch.Tensor:
    """The task's loss summed over owned rows, divided by the GLOBAL element count: summing the
    workers' losses gives the mean loss (squared error) of the whole sampled graph."""
    y = torch.from_numpy(target[plan.owned]).to(pred.dtype)
    return task.loss(pred[:plan.num_owned], y, "sum") / (plan.global_owned * y.shape[1])


def batches(order: np.ndarray, size: int) -> list[np.ndarray]:
    """``order`` cut into consecutive batches of ``size`` (the last one may be shorter)."""
    return [order[k:k + size] for k in range(0, len(order), size)]


def train_epoch(model: torch.nn.Module, step: Callable[[torch.Tensor, dict], None],
                data: FieldData, ph, seed: int, epoch: int, rank: int = 0, world: int = 1,
                dtype: torch.dtype = torch.float32, timers: dict[str, float] | None = None,
                advance: Callable[[float], None] | None = None,
                task: Task = FIELD_REGRESSION) -> float:
    """One pass over the training samples (one freshly sampled graph each); mean train MSE.

    Samples go ``ph.batch_fields`` at a time (default 1) into one optimizer step whose loss is
    the mean of their losses, so the step follows the batch's mean gradient.
    ``step(loss, timers)`` runs backward, the gradient sum over workers and the optimizer step
    (:meth:`dsgraph.trainer.Trainer.step`). Every worker draws the same global sample from the
    shared seed and trains on its subdomain. ``timers`` (if given) accumulates this worker's
    seconds per phase: ``graph_s`` (sampling, edges, plan), ``compute_s`` (forward + backward
    without the halo exchanges), ``halo_s`` (exchanges, waiting for the peer included),
    ``allreduce_s`` (with the gradient clipping), ``step_s`` (optimizer) and ``cpu_s`` (CPU
    time this process got: below the wall time when other jobs share the cores).
    ``advance(loss)`` is called after every step (a progress bar); ``task`` gives the loss.
    """
    model.train()
    fs = data.train
    order = np.random.default_rng([seed, epoch]).permutation(len(fs))
    total = 0.0
    t = timers if timers is not None else {}
    for k in ("graph_s", "compute_s", "halo_s", "allreduce_s", "step_s", "cpu_s"):
        t.setdefault(k, 0.0)
    cpu0 = time.process_time()
    for batch in batches(order, getattr(ph, "batch_fields", 1)):
        losses, plans = [], []
        for i in batch:
            t0 = time.perf_counter()
            # Seeded per (epoch, sample): the graph does not depend on the batching.
            rng = np.random.default_rng([seed, epoch, int(i)])
            sg, plan = local_graph(fs, int(i), None, ph, data.coef_cols, rng, rank, world, seed)
            t1 = time.perf_counter()
            pred = local_forward(model, sg, plan, dtype)
            losses.append(local_loss(pred, fs.y[i][sg.nodes], plan, task))
            plans.append(plan)
            t["graph_s"] += t1 - t0
            t["compute_s"] += time.perf_counter() - t1
        loss = torch.stack(losses).sum() / len(batch)
        step(loss, t)
        comm = sum(plan.comm_s for plan in plans)
        t["compute_s"] += t.pop("backward_s", 0.0) - comm  # forward and backward are compute
        t["halo_s"] += comm
        total += float(loss.item()) * len(batch)
        if advance is not None:
            advance(float(loss.item()))
    t["cpu_s"] += time.process_time() - cpu0
    return dist.all_sum([total])[0] / len(fs)


@torch.no_grad()
def predict(model: torch.nn.Module, data: FieldData, fs: FieldSet, ph, seed: int, repeats: int,
            rank: int = 0, world: int = 1, dtype: torch.dtype = torch.float32) -> np.ndarray:
    """Full-field prediction (normalized units), GKN-style: each repeat splits all points into
    random groups of ``sampled_nodes``, predicts each group's radius graph and scatters back; the
    repeats are averaged. Returns (N, M, C) on every worker."""
    model.eval()
    out = np.zeros(fs.y.shape, dtype=np.float64)
    for i in range(len(fs)):
        acc = np.zeros(fs.y.shape[1:], dtype=np.float64)
        for r in range(repeats):
            rng = np.random.default_rng([seed, 10_000_019, i, r])
            for nodes in sampling.cover_groups(fs.num_points, ph.sampled_nodes, rng):
                sg, plan = local_graph(fs, i, nodes, ph, data.coef_cols, rng, rank, world, seed)
                pred = local_forward(model, sg, plan, dtype)[:plan.num_owned]
                acc[sg.nodes[plan.owned]] += pred.double().numpy()
        out[i] = dist.all_sum_(torch.from_numpy(acc)).numpy() / repeats
    return out
