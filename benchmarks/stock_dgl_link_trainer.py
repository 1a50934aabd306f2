"""Stock DistDGL link-prediction trainer: the "stock DGL" peer of dsgraph's sampled
link-prediction trainer (dsgraph/modes/sampled/links.py).

It follows the logic of DGL 2.1's distributed unsupervised GraphSAGE example
(examples/pytorch/graphsage/dist/train_dist_unsupervised.py at dmlc/dgl v2.1.0; DGL 2.1 has no
other distributed link-prediction example) and contains no dsgraph code: it imports only the
standard library, torch, numpy, dgl and what the stock peers share
(``benchmarks.stock_dgl_common``). Launched as ``python -m benchmarks.stock_dgl_link_trainer
--run-dir RUN --eval-edges EVAL.npz ...`` through ``dsgraph.cluster.dgl_job.run_dgl_job(...,
stock=True)``.

As the example does: every edge of the partitioned graph is a training edge, shared out with
``dgl.distributed.edge_split``; ``DistEdgeDataLoader`` yields the positive pair graph, a negative
pair graph from ``negative_sampler.Uniform(k)`` (each edge's source with k uniform destinations)
and the neighbour-sampled blocks of their endpoints; the scores are dot products of the model's
outputs, the loss is binary cross-entropy, trained with DDP and Adam.

Exclusion: the example asks for ``exclude="reverse_id"`` with the identity as reverse map only
when run with ``--remove_edge`` (off by default); ``--remove-edge`` here does the same. On the
unpatched DGL 2.1 runtime this excludes nothing: the loader's ``EdgeCollator`` passes the edge
ids to ``NeighborSampler.sample_blocks``, which hands them to ``DistGraph.sample_neighbors``,
and that method ignores ``exclude_edges`` (the server-side support came after 2.1). So every
positive edge can be seen by message passing while the model learns to predict it; that is what
a user of stock DGL 2.1 gets, and what this benchmark peer measures.

Evaluation replaces the example's logistic regression on node labels with link metrics: after
the last epoch, exact layer-wise full-neighbour inference gives every node's embedding; each
trainer ranks its share of the held-out edges of ``--eval-edges`` (stock partition node ids)
against their fixed negatives. MRR counts ties half (mean of optimistic and pessimistic rank, as
OGB); Hits@K counts a positive strictly above the K-th best shared negative pair. Rank 0 writes
``stock_metrics.jsonl`` (one line per epoch) and ``stock_summary.json`` into the run folder.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import dgl
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from dgl.dataloading import DistEdgeDataLoader
from torch import nn

from benchmarks.stock_dgl_common import (StackedGNN, add_common_args, all_reduce, connect,
                                         disconnect, layerwise_inference, run_epochs,
                                         write_json_atomic)

_ROWS_PER_READ = 1024  # held-out edges scored per embedding read (bounds each RPC message)


def parse_args() -> argparse.Namespace:
    """Command line of the trainer."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--eval-edges", required=True,
                   help=".npz: val_pos, val_neg_dst, test_pos, test_neg_dst, hits_neg")
    p.add_argument("--model", choices=("sage", "gcn"), default="sage")
    p.add_argument("--batch-size", type=int, default=1024, help="training edges per batch")
    p.add_argument("--negatives", type=int, default=1, help="uniform negatives per edge")
    p.add_argument("--remove-edge", action="store_true",
                   help="ask for exclude='reverse_id' as the example's --remove_edge does "
                        "(a no-op on DGL 2.1's DistGraph, see the module docstring)")
    p.add_argument("--hits-k", type=int, default=50)
    return p.parse_args()


def pair_scores(h: torch.Tensor, pair_graph: Any) -> torch.Tensor:
    """Dot product of the outputs of each edge's two endpoints (rows of ``h``)."""
    u, v = pair_graph.edges()
    return (h[u] * h[v]).sum(-1)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, g: Any, loader: Any
                ) -> dict[str, float]:
    """One pass over this trainer's training edges; figures combined over all trainers."""
    feat = g.ndata["feat"]
    model.train()
    loss_sum = edges = batches = 0.0
    dist.barrier()  # every trainer starts the clock together
    t0 = time.perf_counter()
    with model.join():  # trainers may have unequal batch counts
        for input_nodes, pos_graph, neg_graph, blocks in loader:
            h = model(blocks, feat[input_nodes])
            pos, neg = pair_scores(h, pos_graph), pair_scores(h, neg_graph)
            loss = F.binary_cross_entropy_with_logits(
                torch.cat([pos, neg]), torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * pos.numel()
            edges += pos.numel()
            batches += 1
    loop_s = all_reduce([time.perf_counter() - t0], dist.ReduceOp.MAX)[0]
    tot = all_reduce([loss_sum, edges, batches])
    return {"loss": tot[0] / max(tot[1], 1.0), "edges_per_s": tot[1] / loop_s,
            "epoch_s": loop_s, "edges": int(tot[1]), "batches": int(tot[2])}


def reciprocal_ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """1 / rank of each positive score ``pos`` (P,) among its negatives ``neg`` (P, K), a tie
    counting half (the mean of the optimistic and the pessimistic rank)."""
    above = (neg > pos[:, None]).sum(1).double()
    at_or_above = (neg >= pos[:, None]).sum(1).double()
    return 1.0 / (1.0 + 0.5 * (above + at_or_above))


def hits_threshold(shared: torch.Tensor, k: int) -> float:
    """The K-th highest shared negative score (-inf with fewer than K): a positive is a hit
    if it scores strictly above it."""
    return float(torch.topk(shared, k).values[-1]) if shared.numel() >= k else float("-inf")


def _score(h: Any, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Dot products of node pairs read from the embedding DistTensor ``h``; ``v`` (P,) or
    (P, K) destinations of the P sources ``u``."""
    hu, hv = h[u], h[v.reshape(-1)].reshape(*v.shape, -1)
    return (hu.unsqueeze(1) * hv).sum(-1) if v.dim() == 2 else (hu * hv).sum(-1)


@torch.no_grad()
def link_metrics(h: Any, edges: dict[str, np.ndarray], hits_k: int, rank: int, world: int
                 ) -> dict[str, float]:
    """``<split>_mrr`` and ``<split>_hits<K>`` of val and test over all trainers' shares
    (rows rank, rank + world, ...); collective."""
    shared = torch.from_numpy(edges["hits_neg"])
    threshold = hits_threshold(torch.cat([
        _score(h, shared[a:a + _ROWS_PER_READ, 0], shared[a:a + _ROWS_PER_READ, 1])
        for a in range(0, len(shared), _ROWS_PER_READ)]), hits_k)
    sums = []
    for split in ("val", "test"):
        pos = torch.from_numpy(edges[f"{split}_pos"][rank::world])
        neg = torch.from_numpy(edges[f"{split}_neg_dst"][rank::world])
        rr = hits = 0.0
        for a in range(0, len(pos), _ROWS_PER_READ):
            rows = slice(a, a + _ROWS_PER_READ)
            p = _score(h, pos[rows, 0], pos[rows, 1])
            rr += float(reciprocal_ranks(p, _score(h, pos[rows, 0], neg[rows])).sum())
            hits += float((p > threshold).sum())
        sums += [float(len(pos)), rr, hits]
    tot = all_reduce(sums)  # also keeps ``h`` alive until every trainer has read it
    out = {}
    for i, split in enumerate(("val", "test")):
        count = max(tot[3 * i], 1.0)
        out[f"{split}_mrr"] = tot[3 * i + 1] / count
        out[f"{split}_hits{hits_k}"] = tot[3 * i + 2] / count
    return out


def main() -> None:
    """Connect, train ``--epochs`` epochs, evaluate layer-wise, write metrics, disconnect."""
    args = parse_args()
    t_start = time.perf_counter()
    g, meta = connect(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = Path(args.run_dir)
    with np.load(args.eval_edges) as f:
        edges = {k: f[k].astype(np.int64) for k in
                 ("val_pos", "val_neg_dst", "test_pos", "test_neg_dst", "hits_neg")}
    pb = g.get_partition_book()
    train_eids = dgl.distributed.edge_split(torch.ones(g.num_edges(), dtype=torch.bool), pb,
                                            force_even=True)
    loader = DistEdgeDataLoader(
        g, train_eids, dgl.dataloading.NeighborSampler([int(f) for f in args.fanouts.split(",")]),
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(args.negatives),
        exclude="reverse_id" if args.remove_edge else None,
        reverse_eids=torch.arange(g.num_edges()) if args.remove_edge else None,
        batch_size=args.batch_size, shuffle=True, drop_last=False)

    torch.manual_seed(args.seed)
    net = StackedGNN(args.model, g.ndata["feat"].shape[1], args.hidden, args.hidden,
                     args.num_layers, args.dropout)
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    rate = run_epochs(args, rank, run_dir, lambda: train_epoch(model, opt, g, loader),
                      "edges_per_s", lambda epoch, rec: (
                          f"stock epoch {epoch}: {rec['edges_per_s']:.0f} edges/s, "
                          f"loss {rec['loss']:.4f}"))

    h = layerwise_inference(net, g, args.eval_batch_size)
    figures = link_metrics(h, edges, args.hits_k, rank, world)
    del h  # collective delete of the DistTensor, on every trainer
    if rank == 0:
        write_json_atomic(run_dir / "stock_summary.json", {
            **figures,  # test_mrr, val_mrr, test_hits<K>, val_hits<K>
            "edges_per_s": rate,
            "wall_s": time.perf_counter() - t_start, "epochs": args.epochs,
            "num_parts": int(pb.num_partitions()), "trainers": world,
            "remove_edge": args.remove_edge})
        print(f"stock test_mrr {figures['test_mrr']:.4f} val_mrr {figures['val_mrr']:.4f}",
              flush=True)
    disconnect()


if __name__ == "__main__":
    main()
