"""Stock DistDGL trainer: the "stock DGL" anchor of the sampled benchmark (benchmarks/sampled/).

It follows the logic of DGL's own distributed GraphSAGE example
(examples/distributed/graphsage/node_classification.py in dmlc/dgl) and contains no dsgraph
code: it imports only the standard library, torch, numpy and dgl. The benchmark launches it as
``python -m benchmarks.stock_dgl_trainer --run-dir RUN ...`` through
``dsgraph.cluster.dgl_job.run_dgl_job(..., stock=True)``, which sets DGL's environment
(DGL_IP_CONFIG, DGL_CONF_PATH, DGL_ROLE, ...) and torch.distributed's env:// variables.

The model is the same GraphSAGE as dsgraph's (``SAGEConv`` mean layers, ReLU + dropout between
them, none after the last), trained with DDP, Adam and cross-entropy over
``DistNodeDataLoader`` mini-batches; after the last epoch, exact layer-wise full-neighbour
inference gives the validation and test accuracy. Rank 0 writes ``stock_metrics.jsonl`` (one line
per epoch) and ``stock_summary.json`` into the run folder.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from dgl.dataloading import DistNodeDataLoader
from torch import nn

# Label rows read per pull when counting classes (bounds each RPC message).
_CHUNK = 1 << 16


class GraphSAGE(nn.Module):
    """``SAGEConv(in, hidden, "mean")`` ... ``SAGEConv(hidden, num_classes, "mean")`` with ReLU and
    dropout between layers (the architecture of dsgraph's ``models.gnn.GraphSAGE``)."""

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        sizes = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.widths = sizes[1:]
        self.layers = nn.ModuleList(dgl.nn.SAGEConv(i, o, "mean")
                                    for i, o in zip(sizes[:-1], sizes[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward_layer(self, i: int, block: Any, h: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` on one block, with activation and dropout unless it is the last."""
        h = self.layers[i](block, h)
        if i < len(self.layers) - 1:
            h = self.dropout(torch.relu(h))
        return h

    def forward(self, blocks: list, x: torch.Tensor) -> torch.Tensor:
        """All layers, one sampled block each."""
        h = x
        for i, block in enumerate(blocks):
            h = self.forward_layer(i, block, h)
        return h


def parse_args() -> argparse.Namespace:
    """Command line of the trainer."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True, help="folder for stock_metrics.jsonl / summary")
    p.add_argument("--graph-name", default=None, help="default: graph_name of the partition JSON")
    p.add_argument("--fanouts", default="10,25", help="comma list, one per layer")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-batch-size", type=int, default=4096)
    p.add_argument("--gloo-ifname", default=None,
                   help="network interface for gloo (GLOO_SOCKET_IFNAME), as a user exports it "
                        "on hosts whose hostname does not resolve to the cluster network")
    return p.parse_args()


def all_reduce(values: list[float], op: dist.ReduceOp = dist.ReduceOp.SUM) -> list[float]:
    """``values`` reduced elementwise over all trainers (float64)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()


def count_classes(g: Any, rank: int, world: int) -> int:
    """Max label + 1, the labels read in chunks shared out over the trainers."""
    label, n, best = g.ndata["label"], g.num_nodes(), -1.0
    for a in range(rank * _CHUNK, n, world * _CHUNK):
        best = max(best, float(label[torch.arange(a, min(a + _CHUNK, n))].max()))
    return int(all_reduce([best], dist.ReduceOp.MAX)[0]) + 1


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, g: Any, train_nid: torch.Tensor,
                fanouts: list[int], batch_size: int) -> dict[str, float]:
    """One pass over this trainer's training nodes; metrics combined over all trainers."""
    pb = g.get_partition_book()
    feat, label = g.ndata["feat"], g.ndata["label"]
    row_bytes = feat.shape[1] * torch.empty((), dtype=feat.dtype).element_size()
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = DistNodeDataLoader(g, train_nid, sampler, batch_size=batch_size, shuffle=True,
                                drop_last=False)
    model.train()
    loss_sum = correct = seeds_seen = batches = remote_rows = 0.0
    t0 = time.perf_counter()
    with model.join():  # trainers may have unequal batch counts
        for input_nodes, seeds, blocks in loader:
            remote_rows += float((pb.nid2partid(input_nodes) != pb.partid).sum())
            x, y = feat[input_nodes], label[seeds].long()
            out = model(blocks, x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * seeds.numel()
            correct += float((out.argmax(1) == y).sum())
            seeds_seen += seeds.numel()
            batches += 1
    loop_s = all_reduce([time.perf_counter() - t0], dist.ReduceOp.MAX)[0]
    tot = all_reduce([loss_sum, correct, seeds_seen, batches, remote_rows * row_bytes])
    return {"samples_per_s": tot[2] / loop_s, "epoch_s": loop_s,
            "loss": tot[0] / max(tot[2], 1.0), "train_acc": tot[1] / max(tot[2], 1.0),
            "batches": int(tot[3]), "remote_feature_bytes": int(tot[4])}


@torch.no_grad()
def layerwise_inference(model: GraphSAGE, g: Any, batch_size: int) -> Any:
    """Exact logits of every node (a DistTensor): each layer over all neighbours, every trainer
    computing its share of the nodes. Collective: every trainer calls it."""
    model.eval()
    nodes = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool),
                                       g.get_partition_book(), force_even=True)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    x = g.ndata["feat"]
    for i, width in enumerate(model.widths):
        # Anonymous tensors are named by creation order, the same on every trainer. Creating and
        # deleting one (on rebinding ``x``) are collective: every trainer does both in step.
        y = dgl.distributed.DistTensor((g.num_nodes(), width), torch.float32, persistent=False)
        loader = DistNodeDataLoader(g, nodes, sampler, batch_size=batch_size, shuffle=False,
                                    drop_last=False)
        for input_nodes, output_nodes, blocks in loader:
            y[output_nodes] = model.forward_layer(i, blocks[0], x[input_nodes])
        g.barrier()  # every share written before anyone reads this layer
        x = y
    return x


def accuracy(pred: Any, g: Any, ids: dict[str, torch.Tensor]) -> dict[str, float]:
    """``<split>_acc`` of each split: correct / total, counts summed over trainers."""
    label, counts = g.ndata["label"], []
    for nid in ids.values():
        counts += [float((pred[nid].argmax(1) == label[nid].long()).sum()), float(nid.numel())]
    tot = all_reduce(counts)  # also keeps ``pred`` alive until every trainer has read it
    return {f"{name}_acc": tot[2 * k] / max(tot[2 * k + 1], 1.0) for k, name in enumerate(ids)}


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` via a temporary file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def main() -> None:
    """Connect, train ``--epochs`` epochs, evaluate layer-wise, write metrics, disconnect."""
    args = parse_args()
    torch.set_num_threads(1)
    logging.getLogger("dgl-distributed-socket").setLevel(logging.ERROR)
    if args.gloo_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.gloo_ifname
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])  # before the gloo group, as DGL does
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = Path(args.run_dir)
    meta = json.loads(Path(os.environ["DGL_CONF_PATH"]).read_text())
    g = dgl.distributed.DistGraph(args.graph_name or meta["graph_name"],
                                  part_config=os.environ["DGL_CONF_PATH"])
    pb = g.get_partition_book()
    ids = {name: dgl.distributed.node_split(g.ndata[f"{name}_mask"], pb, force_even=True)
           for name in ("train", "val", "test")}
    num_classes = int(meta.get("num_classes", 0) or 0)
    if num_classes <= 0:
        num_classes = count_classes(g, rank, world)
    fanouts = [int(f) for f in args.fanouts.split(",")]

    torch.manual_seed(args.seed)
    net = GraphSAGE(g.ndata["feat"].shape[1], args.hidden, num_classes, args.num_layers,
                    args.dropout)
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    metrics_path = run_dir / "stock_metrics.jsonl"
    if rank == 0:
        metrics_path.write_text("")
    rates = []
    for epoch in range(1, args.epochs + 1):
        epoch_seed = args.seed * 1000 + rank + epoch
        torch.manual_seed(epoch_seed)
        dgl.seed(epoch_seed)
        rec = {"epoch": epoch, **train_epoch(model, opt, g, ids["train"], fanouts,
                                             args.batch_size)}
        rates.append(rec["samples_per_s"])
        if rank == 0:
            with metrics_path.open("a") as f:
                f.write(json.dumps(rec) + "\n")
                f.flush()
            print(f"stock epoch {epoch}: {rec['samples_per_s']:.0f} seeds/s, "
                  f"loss {rec['loss']:.4f}, train_acc {rec['train_acc']:.4f}", flush=True)

    pred = layerwise_inference(net, g, args.eval_batch_size)
    acc = accuracy(pred, g, {"val": ids["val"], "test": ids["test"]})
    del pred  # collective delete of the DistTensor, on every trainer
    if rank == 0:
        write_json_atomic(run_dir / "stock_summary.json", {
            "test_acc": acc["test_acc"], "val_acc": acc["val_acc"],
            "samples_per_s": statistics.median(rates[1:] or rates) if rates else 0.0,
            "epochs": args.epochs, "num_parts": int(pb.num_partitions()), "trainers": world})
        print(f"stock test_acc {acc['test_acc']:.4f} val_acc {acc['val_acc']:.4f}", flush=True)
    dgl.distributed.exit_client()  # servers exit once every trainer has said goodbye
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
