"""Plain DGL with the whole graph in memory: the ``limit`` row of the sampled benchmarks.

The ceiling a distributed job on the same cores reaches only by doing less work: one process per
core, each holding the whole graph (``dgl.load_graphs``), no servers, no partitions, sampling
with ``dgl.dataloading.DataLoader`` (``use_ddp``: each process its share of the training
nodes) and the same model as the stock peer (DGL's own ``SAGEConv`` layers,
``benchmarks.stock_dgl_common.StackedGNN``), trained with DDP, Adam and cross-entropy. Like the
stock trainers it imports only the standard library, numpy, torch, dgl and what the stock peers
share (no dsgraph code). The benchmarks launch it as ``python -m benchmarks.limit_trainer
--run-dir RUN --graph FILE ...`` through ``dsgraph.cluster.launch.run_workers`` (gloo's env://
variables), and read the same ``stock_metrics.jsonl`` / ``stock_summary.json`` as the stock
trainer's: after the last epoch the test nodes' neighbourhoods are sampled with the training
fanouts for the test accuracy (as the ``scale`` benchmark evaluates every row).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import dgl
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from benchmarks.stock_dgl_common import (EpochTally, add_common_args, all_reduce, ddp_sage,
                                         run_epochs, seeds_line, timed_batches,
                                         write_json_atomic)


def parse_args() -> argparse.Namespace:
    """Command line of the trainer."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--graph", required=True,
                   help="DGL binary graph file (dgl.save_graphs) whose ndata holds feat, label, "
                        "train_mask and test_mask")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--eval", choices=("sampled",), default="sampled",
                   help="the test nodes, neighbourhoods sampled with --fanouts (the stock "
                        "trainer's option; layer-wise inference is not offered here)")
    return p.parse_args()


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, g: dgl.DGLGraph,
                train_nid: torch.Tensor, fanouts: list[int], batch_size: int,
                profile: bool = False) -> dict[str, float]:
    """One pass over this process's share of the training nodes; metrics summed over all
    (``profile``: with the epoch's phases)."""
    # DGL's DDP loader shuffles with numpy: seed it from the epoch's torch seed (run_epochs).
    np.random.seed(torch.initial_seed() % 2**32)
    loader = dgl.dataloading.DataLoader(g, train_nid, dgl.dataloading.NeighborSampler(fanouts),
                                        batch_size=batch_size, shuffle=True, drop_last=False,
                                        use_ddp=True)
    feat, label = g.ndata["feat"], g.ndata["label"]
    model.train()
    tally = EpochTally(profile)
    for input_nodes, seeds, blocks in timed_batches(loader):
        tally.batch(model, opt, blocks, feat, label, input_nodes, seeds)
    return {**tally.record(), "remote_feature_bytes": 0}


@torch.no_grad()
def sampled_test_accuracy(model: nn.Module, g: dgl.DGLGraph, test_nid: torch.Tensor,
                          fanouts: list[int], batch_size: int) -> float:
    """Accuracy on ``test_nid`` (each process its strided share), neighbourhoods sampled with
    ``fanouts``, counts summed over all processes."""
    model.eval()
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = test_nid[rank::world]
    loader = dgl.dataloading.DataLoader(g, mine, dgl.dataloading.NeighborSampler(fanouts),
                                        batch_size=batch_size, shuffle=False, drop_last=False)
    feat, label = g.ndata["feat"], g.ndata["label"]
    correct = 0.0
    for input_nodes, seeds, blocks in loader:
        correct += float((model(blocks, feat[input_nodes]).argmax(1) == label[seeds].long()).sum())
    tot = all_reduce([correct, float(mine.numel())])
    return tot[0] / max(tot[1], 1.0)


def main() -> None:
    """Join the group, load the graph, train ``--epochs`` epochs, score the test nodes, write
    the metrics."""
    args = parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = Path(args.run_dir)
    g: Any = dgl.load_graphs(args.graph)[0][0]
    train_nid = torch.nonzero(g.ndata["train_mask"], as_tuple=True)[0]
    test_nid = torch.nonzero(g.ndata["test_mask"], as_tuple=True)[0]
    num_classes = int(g.ndata["label"].max()) + 1
    fanouts = [int(f) for f in args.fanouts.split(",")]

    net, model, opt = ddp_sage(args, g.ndata["feat"].shape[1], num_classes)
    rate = run_epochs(
        args, rank, run_dir,
        lambda: train_epoch(model, opt, g, train_nid, fanouts, args.batch_size, args.phases),
        "samples_per_s", seeds_line("limit"))
    test_acc = sampled_test_accuracy(net, g, test_nid, fanouts, args.eval_batch_size)
    if rank == 0:
        write_json_atomic(run_dir / "stock_summary.json", {
            "test_acc": test_acc, "val_acc": None, "eval": "sampled", "samples_per_s": rate,
            "epochs": args.epochs, "num_parts": 1, "trainers": world})
        print(f"limit test_acc {test_acc:.4f} (sampled evaluation)", flush=True)


if __name__ == "__main__":
    main()
    # Results are written. Leave without destructors: with torch 2.2, destroying the gloo group
    # (here or at exit) deadlocked a process now and then: its destructor joins gloo's threads
    # holding the GIL while one of them needs it to free the last all-reduce's tensor.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
