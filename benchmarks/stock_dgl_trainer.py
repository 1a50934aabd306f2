"""Stock DistDGL trainer: the "stock DGL" anchor of the sampled benchmark (benchmarks/sampled/).

It follows the logic of DGL's own distributed GraphSAGE example
(examples/distributed/graphsage/node_classification.py in dmlc/dgl) and contains no dsgraph
code: it imports only the standard library, torch, numpy, dgl, what the stock peers share
(``benchmarks.stock_dgl_common``, itself only stdlib, torch and dgl) and the phase clock both
sides are timed with (``dsgraph.phases``, with ``--phases``). The benchmark launches it
as ``python -m benchmarks.stock_dgl_trainer --run-dir RUN ...`` through
``dsgraph.cluster.dgl_job.run_dgl_job(..., stock=True)``, which sets DGL's environment
(DGL_IP_CONFIG, DGL_CONF_PATH, DGL_ROLE, ...) and torch.distributed's env:// variables.

The model is the same GraphSAGE as dsgraph's (DGL's own ``SAGEConv`` mean layers, which dsgraph
runs in the cheaper order of the same function: dsgraph.models.order; ReLU + dropout between
them, none after the last), trained with DDP, Adam and cross-entropy over
``DistNodeDataLoader`` mini-batches; after the last epoch, exact layer-wise full-neighbour
inference over all nodes gives the validation and test accuracy (``--eval layerwise``, the
example's way), or ``--eval sampled`` samples the test nodes' neighbourhoods with the training
fanouts and gives the test accuracy only (as dsgraph's ``sampled.eval: sampled``). Rank 0
writes ``stock_metrics.jsonl`` (one line per epoch) and ``stock_summary.json`` into the run
folder.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.distributed as dist
from dgl.dataloading import DistNodeDataLoader
from torch import nn

from benchmarks.stock_dgl_common import (EpochTally, add_common_args, all_reduce, connect,
                                         count_classes, ddp_sage, disconnect,
                                         layerwise_inference, run_epochs, seeds_line,
                                         timed_batches, write_json_atomic)

def parse_args() -> argparse.Namespace:
    """Command line of the trainer."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--eval", choices=("layerwise", "sampled"), default="layerwise",
                   help="layerwise: exact, all nodes (val and test accuracy); sampled: the test "
                        "nodes only, neighbourhoods sampled with --fanouts")
    return p.parse_args()


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, g: Any, train_nid: torch.Tensor,
                fanouts: list[int], batch_size: int, profile: bool = False) -> dict[str, float]:
    """One pass over this trainer's training nodes; metrics combined over all trainers
    (``profile``: with the epoch's phases)."""
    pb = g.get_partition_book()
    feat, label = g.ndata["feat"], g.ndata["label"]
    row_bytes = feat.shape[1] * torch.empty((), dtype=feat.dtype).element_size()
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = DistNodeDataLoader(g, train_nid, sampler, batch_size=batch_size, shuffle=True,
                                drop_last=False)
    model.train()
    tally, remote_rows = EpochTally(profile), 0.0
    with model.join():  # trainers may have unequal batch counts
        for input_nodes, seeds, blocks in timed_batches(loader):
            remote_rows += float((pb.nid2partid(input_nodes) != pb.partid).sum())
            tally.batch(model, opt, blocks, feat, label, input_nodes, seeds)
    return {**tally.record(),
            "remote_feature_bytes": int(all_reduce([remote_rows * row_bytes])[0])}


def accuracy(pred: Any, g: Any, ids: dict[str, torch.Tensor]) -> dict[str, float]:
    """``<split>_acc`` of each split: correct / total, counts summed over trainers."""
    label, counts = g.ndata["label"], []
    for nid in ids.values():
        counts += [float((pred[nid].argmax(1) == label[nid].long()).sum()), float(nid.numel())]
    tot = all_reduce(counts)  # also keeps ``pred`` alive until every trainer has read it
    return {f"{name}_acc": tot[2 * k] / max(tot[2 * k + 1], 1.0) for k, name in enumerate(ids)}


@torch.no_grad()
def sampled_test_accuracy(model: nn.Module, g: Any, test_nid: torch.Tensor, fanouts: list[int],
                          batch_size: int) -> dict[str, float]:
    """``test_acc`` of this trainer's test nodes, neighbourhoods sampled with ``fanouts``,
    counts summed over trainers."""
    model.eval()
    feat, label = g.ndata["feat"], g.ndata["label"]
    loader = DistNodeDataLoader(g, test_nid, dgl.dataloading.NeighborSampler(fanouts),
                                batch_size=batch_size, shuffle=False, drop_last=False)
    correct = 0.0
    for input_nodes, seeds, blocks in loader:
        correct += float((model(blocks, feat[input_nodes]).argmax(1) == label[seeds].long()).sum())
    tot = all_reduce([correct, float(test_nid.numel())])
    return {"test_acc": tot[0] / max(tot[1], 1.0)}


def main() -> None:
    """Connect, train ``--epochs`` epochs, evaluate (``--eval``), write metrics, disconnect."""
    args = parse_args()
    g, meta = connect(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = Path(args.run_dir)
    pb = g.get_partition_book()
    ids = {name: dgl.distributed.node_split(g.ndata[f"{name}_mask"], pb, force_even=True)
           for name in ("train", "val", "test")}
    num_classes = int(meta.get("num_classes", 0) or 0)
    if num_classes <= 0:
        num_classes = count_classes(g.ndata["label"], g.num_nodes(), rank, world)
    fanouts = [int(f) for f in args.fanouts.split(",")]

    net, model, opt = ddp_sage(args, g.ndata["feat"].shape[1], num_classes)

    rate = run_epochs(
        args, rank, run_dir,
        lambda: train_epoch(model, opt, g, ids["train"], fanouts, args.batch_size, args.phases),
        "samples_per_s", seeds_line("stock"))

    if args.eval == "sampled":
        acc = {"val_acc": None, **sampled_test_accuracy(net, g, ids["test"], fanouts,
                                                        args.eval_batch_size)}
    else:
        pred = layerwise_inference(net, g, args.eval_batch_size)
        acc = accuracy(pred, g, {"val": ids["val"], "test": ids["test"]})
        del pred  # collective delete of the DistTensor, on every trainer
    if rank == 0:
        write_json_atomic(run_dir / "stock_summary.json", {
            "test_acc": acc["test_acc"], "val_acc": acc["val_acc"], "eval": args.eval,
            "samples_per_s": rate,
            "epochs": args.epochs, "num_parts": int(pb.num_partitions()), "trainers": world})
        print(f"stock test_acc {acc['test_acc']:.4f} ({args.eval} evaluation)", flush=True)
    disconnect()


if __name__ == "__main__":
    main()
