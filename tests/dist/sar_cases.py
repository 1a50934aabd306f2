"""Gradient checks of SAR against single-process DGL (test harness of ``test_sar_grad``).

A *case* is (model name, model args, mode, dtype, num_classes, optional ``chunk_rows`` of the
sequential-aggregation core); both sides build the model after
``torch.manual_seed(seed)`` so initial weights are identical. :func:`run_cases` runs every case
on N real gloo worker processes (one SAR worker per partition), :func:`reference_case` runs it on
the whole graph with plain DGL in this process; :func:`rel_err` / :func:`max_rel_err` compare.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, ContextManager, Optional

import torch
import torch.nn.functional as F

from dsgraph.models.registry import build_model

WORKER_TIMEOUT_S = 100  # a stuck worker prints where it is, then exits


def full_graph_loss(model, graph, x: torch.Tensor, label: torch.Tensor, train: torch.Tensor,
                    num_train_global: float) -> torch.Tensor:
    """Cross-entropy summed over the labelled nodes here, divided by the global label count."""
    logits = model(graph, x)
    return F.cross_entropy(logits[train], label[train], reduction="sum") / num_train_global


def make_model(case: dict, in_feats: int, num_classes: int, seed: int):
    """The case's model with deterministic initial weights, in the case's dtype."""
    torch.manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    return build_model(case["model"], in_feats, num_classes, dict(case.get("args", {}))).to(dtype)


def run_steps(model, graph, x, label, train, num_train, adam_steps: int, lr: float,
              sync: Optional[Callable] = None, features_grad: bool = True,
              forward_context: Optional[Callable[[torch.Tensor], ContextManager]] = None
              ) -> dict[str, Any]:
    """One gradient evaluation, then ``adam_steps`` Adam steps; returns loss/grads/weights.

    ``sync(parameters)`` sums gradients over workers (None in a single process); the returned
    ``loss`` is this worker's share (sum over workers for the total). ``features_grad``: the
    input features require grad (``x_grad`` is returned); else they do not, as in training.
    Every forward runs inside a fresh ``forward_context(x)`` (x: the features it is given).
    """
    x = x.detach().requires_grad_(features_grad)
    context = forward_context or (lambda _x: contextlib.nullcontext())
    with context(x):
        loss = full_graph_loss(model, graph, x, label, train, num_train)
    loss.backward()
    if sync is not None:
        sync(model.parameters())
    out = {"loss": loss.item(), "x_grad": x.grad.detach().clone() if features_grad else None,
           "grads": {n: p.grad.detach().clone() for n, p in model.named_parameters()}}
    if adam_steps:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        x = x.detach()
        for _ in range(adam_steps):
            opt.zero_grad()
            with context(x):
                loss = full_graph_loss(model, graph, x, label, train, num_train)
            loss.backward()
            if sync is not None:
                sync(model.parameters())
            opt.step()
        out["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max|a - ref| / max|ref| (0 when both are zero)."""
    scale = ref.abs().max().item() if ref.numel() else 0.0
    diff = (a - ref).abs().max().item() if ref.numel() else 0.0
    return diff / scale if scale > 0 else diff


def max_rel_err(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """Max over tensors of :func:`rel_err`; keys must match."""
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    return max((rel_err(got[k], ref[k]) for k in ref), default=0.0)


def saved_edge_tensors(model, graph, x: torch.Tensor, num_edges: int,
                       other_sizes: tuple[int, ...] = ()) -> Optional[int]:
    """How many tensors autograd saves with one row per local edge in a forward of ``model``.

    None when ``num_edges`` equals one of ``other_sizes`` (node counts), where the row count
    cannot tell an edge tensor from a node tensor.
    """
    if num_edges == 0 or num_edges in other_sizes:
        return None
    count = 0

    def pack(t: torch.Tensor):
        nonlocal count
        count += int(t.dim() > 0 and t.shape[0] == num_edges)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(graph, x)
    return count


# --- worker processes ----------------------------------------------------------------------------

def case_worker(rank: int, world: int, port: int, part_json: str, cases: list[dict],
                out_dir: str, seed: int = 0, adam_steps: int = 5, lr: float = 0.01) -> None:
    """One gloo rank: run every case on this rank's partition, save ``out_dir/rank<r>.pt``, and
    leave through :func:`dsgraph.cluster.worker.exit_now` (0, or 1 after a traceback).

    Saved per case: the worker's loss share, summed gradients (identical on all ranks), the
    input-feature gradient of its own nodes keyed by original node id, weights after Adam.
    """
    import faulthandler
    import traceback

    from dsgraph.cluster.worker import exit_now

    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S, exit=True)
    try:
        _case_worker_body(rank, world, port, part_json, cases, out_dir, seed, adam_steps, lr)
    except BaseException:  # noqa: BLE001 - a failed rank must end with a non-zero code
        traceback.print_exc()
        exit_now(1)
    exit_now(0)


def _case_worker_body(rank: int, world: int, port: int, part_json: str, cases: list[dict],
                      out_dir: str, seed: int, adam_steps: int, lr: float) -> None:
    from dsgraph import dist
    from dsgraph.cluster.worker import init_process_group
    from dsgraph.compress import compressed
    from dsgraph.config import CompressionConfig
    from dsgraph.sar.model import prepare_model
    from dsgraph.sar.worker import setup_worker

    # The environment every job process gets (dsgraph.cluster.launch): one thread, env:// group.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    init_process_group(timeout_s=120)
    w = setup_worker(part_json, rank, world)
    nd = w.part.ndata
    train = nd["train_mask"]
    num_train = dist.all_sum([float(train.sum())])[0]
    results = []
    for case in cases:
        w.set_mode(case["mode"])
        w.rt.chunk_rows = case.get("chunk_rows", 0)
        sent0 = w.comm.bytes_sent
        model = make_model(case, nd["feat"].shape[1], case["num_classes"], seed)
        prepare_model(model)
        dist.broadcast_module(model)
        x = nd["feat"].to(getattr(torch, case["dtype"]))
        sync = dist.allreduce_grads if world > 1 else None
        plan = w.plan
        saved = saved_edge_tensors(model, w.graph, x, plan.num_edges,
                                   (plan.num_local, plan.num_local + plan.num_halo))
        made, compressors = [], []  # ``rebuild``: sar.rebuild_inputs, features without grad

        def rebuild_context(features: torch.Tensor):
            # ``compress`` (bits): inside a compressor, which stores every save not rebuilt
            stack = contextlib.ExitStack()
            comp = None
            if case.get("compress"):
                comp = stack.enter_context(compressed(CompressionConfig(
                    enabled=True, bits=case["compress"], min_numel=0)))
                compressors.append(comp)
            made.append(stack.enter_context(w.rebuild_inputs([features], comp)))
            return stack

        res = run_steps(model, w.graph, x, nd["label"], train, num_train, adam_steps, lr, sync,
                        features_grad=not case.get("rebuild"),
                        forward_context=rebuild_context if case.get("rebuild") else None)
        res["rebuilt"] = sum(getattr(c, "rebuilt", 0) for c in made)
        res["quantized"] = sum(c.stats.quantized for c in compressors)
        res["saved_edge_tensors"] = saved
        res["orig_id"] = nd["orig_id"].clone()
        res["bytes_sent"] = w.comm.bytes_sent - sent0
        results.append(res)
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()  # no rank leaves while a peer may still need it


# What the worker processes' server imports once (below): torch, DGL, dsgraph's SAR and DS-MPNN.
PRELOAD = ["torch", "dgl", "pytest", "dsgraph.sar.worker", "dsgraph.physics.engine"]


def worker_context():
    """The multiprocessing context of the tests' worker processes: ``forkserver``, whose server
    (started on first use, one per test session) imports :data:`PRELOAD`; every worker is a
    fresh process forked from it, with no torch thread pool, group or state of this one. A
    spawned worker would import them itself: 2-3 s of the 2 cores per process, most of a small
    job's time."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts; later calls change nothing
    return ctx


def spawn(fn: Callable, world: int, args: tuple, timeout_s: float = 120.0) -> None:
    """Run ``fn(rank, world, port, *args)`` in ``world`` fresh processes
    (:func:`worker_context`); raise if any fails or the group outlives ``timeout_s``."""
    from dsgraph.cluster.ports import free_port_range

    ctx = worker_context()
    port = free_port_range(1)
    procs = [ctx.Process(target=fn, args=(r, world, port) + tuple(args), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode not in (0, None):
                break
    finally:
        bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    if bad:
        raise RuntimeError(f"SAR workers failed or timed out (rank, exit code): {bad}")


def run_cases(part_json: str, world: int, cases: list[dict], out_dir: str, seed: int = 0,
              adam_steps: int = 5, timeout_s: float = 120.0) -> list[dict]:
    """Run ``cases`` on ``world`` SAR workers; per case: total loss, grads, weights, x_grad by
    original id (rows of nodes no worker owns stay zero), bytes sent summed over workers."""
    spawn(case_worker, world, (part_json, cases, out_dir, seed, adam_steps), timeout_s)
    per_rank = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]
    merged = []
    for i, _case in enumerate(cases):
        parts = [pr[i] for pr in per_rank]
        n = max(int(p["orig_id"].max()) + 1 if p["orig_id"].numel() else 0 for p in parts)
        xg = None
        if parts[0]["x_grad"] is not None:
            xg = parts[0]["x_grad"].new_zeros((n,) + tuple(parts[0]["x_grad"].shape[1:]))
            for p in parts:
                xg[p["orig_id"]] = p["x_grad"]
        merged.append({"loss": sum(p["loss"] for p in parts), "grads": parts[0]["grads"],
                       "weights": parts[0].get("weights"), "x_grad": xg,
                       "bytes_sent": sum(p["bytes_sent"] for p in parts),
                       "rebuilt": [p["rebuilt"] for p in parts],
                       "quantized": [p["quantized"] for p in parts],
                       "saved_edge_tensors": [p["saved_edge_tensors"] for p in parts],
                       "rank_grads": [p["grads"] for p in parts],
                       "rank_weights": [p.get("weights") for p in parts]})
    return merged


def reference_case(g, case: dict, seed: int = 0, adam_steps: int = 5, lr: float = 0.01) -> dict:
    """The same case on the whole graph ``g`` in one process with plain DGL."""
    model = make_model(case, g.ndata["feat"].shape[1], case["num_classes"], seed)
    x = g.ndata["feat"].to(getattr(torch, case["dtype"]))
    train = g.ndata["train_mask"].bool()
    return run_steps(model, g, x, g.ndata["label"], train, float(train.sum()), adam_steps, lr,
                     features_grad=not case.get("rebuild"))
