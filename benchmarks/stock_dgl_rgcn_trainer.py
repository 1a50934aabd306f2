"""Stock DistDGL RGCN trainer: the "stock DGL" anchor of the hetero benchmark (benchmarks/hetero/).

It follows the logic of DGL's own distributed RGCN example
(examples/distributed/rgcn/node_classification.py in dmlc/dgl) and contains no dsgraph code: it
imports only the standard library, torch, numpy, dgl and what the stock peers share
(``benchmarks.stock_dgl_common``). The benchmark launches it as
``python -m benchmarks.stock_dgl_rgcn_trainer --run-dir RUN ...`` through
``dsgraph.cluster.dgl_job.run_dgl_job(..., stock=True)`` on partitions written by DGL's own
``dgl.distributed.partition_graph`` for the heterograph.

As the example: the target type's training nodes split by ``node_split(force_even=True)``,
``DistNodeDataLoader`` over ``{target: ids}`` with a ``NeighborSampler`` per layer, featureless
node types given ``DistEmbedding`` rows (uniform(-1, 1)) updated by DGL's distributed
``SparseAdam``, dense parameters in DDP with Adam, cross-entropy on the target type's logits.
The model is the same RGCN as dsgraph's ``models.hetero.RGCN`` (per relation a right-normalised
``GraphConv`` without bias in a summing ``HeteroGraphConv``, a self-loop ``Linear`` per node
type, ReLU + dropout between layers), so both systems train the same network. After the last
epoch the target type's test nodes are classified on neighbourhoods sampled with the training
fanouts. Rank 0 writes ``stock_metrics.jsonl`` (one line per epoch) and ``stock_summary.json``.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

import dgl
import torch
import torch.distributed as dist
from dgl.dataloading import DistNodeDataLoader
from torch import nn

from benchmarks.stock_dgl_common import (EpochTally, add_common_args, all_reduce, connect,
                                         count_classes, disconnect, run_epochs,
                                         write_json_atomic)

def parse_args() -> argparse.Namespace:
    """Command line of the trainer."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--target", default=None,
                   help="node type to classify; default: the partition JSON's target_ntype, else "
                        "the only node type with train_mask")
    p.add_argument("--embedding-dim", type=int, default=64,
                   help="width of the learnable rows of node types without feat")
    p.add_argument("--sparse-lr", type=float, default=0.01, help="SparseAdam learning rate")
    return p.parse_args()


class RGCN(nn.Module):
    """``num_layers`` relational layers ``in -> hidden -> ... -> out``: per relation a
    ``GraphConv(norm="right", bias=False)`` summed per destination type, plus a self-loop
    ``Linear`` per node type; ReLU and dropout between layers (dsgraph's ``RGCN``)."""

    def __init__(self, in_feats: dict[str, int], num_classes: int,
                 etypes: list[tuple[str, str, str]], hidden: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        ntypes = sorted(in_feats)
        widths = [dict(in_feats)] + [{t: hidden for t in ntypes}] * (num_layers - 1)
        outs = [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList()
        self.self_loops = nn.ModuleList()
        for w_in, w_out in zip(widths, outs):
            self.layers.append(dgl.nn.HeteroGraphConv(
                {rel: dgl.nn.GraphConv(w_in[src], w_out, norm="right", bias=False,
                                       allow_zero_in_degree=True)
                 for src, rel, dst in etypes}, aggregate="sum"))
            self.self_loops.append(nn.ModuleDict({t: nn.Linear(w_in[t], w_out) for t in ntypes}))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks: list, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """All layers, one sampled block each; output rows per destination type."""
        h = x
        for i, block in enumerate(blocks):
            dst = {t: v[:block.num_dst_nodes(t)] for t, v in h.items() if t in block.dsttypes}
            out = self.layers[i](block, (h, dst))
            h = {t: v + self.self_loops[i][t](dst[t]) for t, v in out.items()}
            if i < len(self.layers) - 1:
                h = {t: self.dropout(torch.relu(v)) for t, v in h.items()}
        return h


def init_embedding(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """DistEmbedding initialiser: uniform in [-1, 1], as the example's ``init_emb``."""
    return torch.empty(shape, dtype=dtype).uniform_(-1.0, 1.0)


def embedding_initialiser() -> Any:
    """:func:`init_embedding` as the servers can unpickle it: DistEmbedding ships its
    initialiser to DGL's servers, which run ``dsgraph.cluster.dgl_server`` as ``__main__``, not
    this script (the example's servers run the example itself), so the function must come from
    this module imported under its own name, not from ``__main__``."""
    name = __spec__.name if __name__ == "__main__" and __spec__ is not None else __name__
    return __import__(name, fromlist=["init_embedding"]).init_embedding


class InputLayer(nn.Module):
    """The input rows of a batch per node type: ``feat`` read from the DistGraph, or a
    ``DistEmbedding`` row for a type without features (the example's ``DistEmbedLayer`` with
    ``--dgl-sparse``, minus its projection of features: dsgraph's RGCN reads them as they are)."""

    def __init__(self, g: Any, dim: int) -> None:
        super().__init__()
        self.features = {t: g.nodes[t].data["feat"] for t in g.ntypes
                         if "feat" in g.nodes[t].data}
        self.embeds = {t: dgl.distributed.DistEmbedding(
            g.num_nodes(t), dim, "node_emb_" + t, embedding_initialiser(),
            g.get_node_partition_policy(t)) for t in g.ntypes if t not in self.features}

    def widths(self) -> dict[str, int]:
        """Input width of every node type."""
        return {**{t: int(f.shape[1]) for t, f in self.features.items()},
                **{t: int(e.embedding_dim) for t, e in self.embeds.items()}}

    def forward(self, input_nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows of every type's input nodes (embedding lookups traced while grad is on)."""
        return {t: self.features[t][ids] if t in self.features else self.embeds[t](ids)
                for t, ids in input_nodes.items()}


def pick_target(g: Any, meta: dict, given: Optional[str]) -> str:
    """``--target``, else the JSON's ``target_ntype``, else the only type with ``train_mask``."""
    if given:
        return given
    if meta.get("target_ntype"):
        return meta["target_ntype"]
    found = [t for t in g.ntypes if "train_mask" in g.nodes[t].data]
    if len(found) != 1:
        raise SystemExit(f"--target: expected one node type with train_mask, got {found}")
    return found[0]


def train_epoch(model: nn.Module, inputs: InputLayer, opt: torch.optim.Optimizer,
                sparse_opt: Any, loader: DistNodeDataLoader, label: Any,
                target: str) -> dict[str, float]:
    """One pass over this trainer's training nodes; metrics combined over all trainers."""
    model.train()
    tally = EpochTally()
    for input_nodes, seeds, blocks in loader:
        tally.step(opt, model(blocks, inputs(input_nodes))[target], label[seeds[target]].long())
        if sparse_opt is not None:
            sparse_opt.step()  # collective: every trainer steps once per batch
    return tally.record()


@torch.no_grad()
def sampled_test_accuracy(model: nn.Module, inputs: InputLayer, g: Any, target: str,
                          test_nid: torch.Tensor, fanouts: list[int],
                          batch_size: int) -> float:
    """Accuracy of the target type's test nodes, neighbourhoods sampled with ``fanouts``,
    counts summed over trainers."""
    model.eval()
    label = g.nodes[target].data["label"]
    loader = DistNodeDataLoader(g, {target: test_nid}, dgl.dataloading.NeighborSampler(fanouts),
                                batch_size=batch_size, shuffle=False, drop_last=False)
    correct = 0.0
    for input_nodes, seeds, blocks in loader:
        out = model(blocks, inputs(input_nodes))[target]
        correct += float((out.argmax(1) == label[seeds[target]].long()).sum())
    tot = all_reduce([correct, float(test_nid.numel())])
    return tot[0] / max(tot[1], 1.0)


def main() -> None:
    """Connect, train ``--epochs`` epochs, evaluate the test nodes, write metrics, disconnect."""
    args = parse_args()
    g, meta = connect(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    run_dir = Path(args.run_dir)
    pb = g.get_partition_book()
    target = pick_target(g, meta, args.target)
    data = g.nodes[target].data
    # As the example: with several trainers per machine DGL's partitioner stores each node's
    # trainer (``trainer_id``), and the split follows it.
    trainer_ids = data["trainer_id"] if "trainer_id" in data else None
    train_nid, test_nid = (dgl.distributed.node_split(data[f"{name}_mask"], pb, ntype=target,
                                                      force_even=True,
                                                      node_trainer_ids=trainer_ids)
                           for name in ("train", "test"))
    # The sparse optimizer's step (and DDP's gradient all-reduce) is collective, so every
    # trainer must run as many batches: the split's shares can differ (by one node with
    # force_even, more when it follows trainer_id), so each keeps the smallest share.
    keep = int(all_reduce([float(train_nid.numel())], dist.ReduceOp.MIN)[0])
    train_nid = train_nid[:keep]
    num_classes = int(meta.get("num_classes", 0) or 0)
    if num_classes <= 0:
        num_classes = count_classes(g.nodes[target].data["label"], g.num_nodes(target), rank,
                                    world)
    fanouts = [int(f) for f in args.fanouts.split(",")]

    torch.manual_seed(args.seed)
    inputs = InputLayer(g, args.embedding_dim)
    net = RGCN(inputs.widths(), num_classes, list(g.canonical_etypes), args.hidden,
               args.num_layers, args.dropout)
    # A relation a batch does not reach, and the last layer's self-loops of non-target types,
    # get no gradient; DDP must be told, or it waits for them forever.
    model = nn.parallel.DistributedDataParallel(net, find_unused_parameters=True)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sparse_opt = (dgl.distributed.optim.SparseAdam(list(inputs.embeds.values()),
                                                   lr=args.sparse_lr)
                  if inputs.embeds else None)
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = DistNodeDataLoader(g, {target: train_nid}, sampler, batch_size=args.batch_size,
                                shuffle=True, drop_last=False)

    rate = run_epochs(
        args, rank, run_dir,
        lambda: train_epoch(model, inputs, opt, sparse_opt, loader, data["label"], target),
        "samples_per_s", lambda epoch, rec: (
            f"stock rgcn epoch {epoch}: {rec['samples_per_s']:.0f} seeds/s, "
            f"loss {rec['loss']:.4f}, train_acc {rec['train_acc']:.4f}"),
        before=g.barrier)  # every trainer starts the clock together

    test_acc = sampled_test_accuracy(net, inputs, g, target, test_nid, fanouts,
                                     args.eval_batch_size)
    if rank == 0:
        write_json_atomic(run_dir / "stock_summary.json", {
            "test_acc": test_acc, "val_acc": None, "eval": "sampled", "target_ntype": target,
            "samples_per_s": rate,
            "epochs": args.epochs, "num_parts": int(pb.num_partitions()), "trainers": world,
            "num_classes": num_classes, "train_seeds_per_trainer": keep})
        print(f"stock rgcn test_acc {test_acc:.4f} (sampled evaluation)", flush=True)
    disconnect()


if __name__ == "__main__":
    main()
