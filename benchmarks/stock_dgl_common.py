"""What the stock DistDGL peers (``stock_dgl_trainer``: node classification,
``stock_dgl_link_trainer``: link prediction, ``stock_dgl_rgcn_trainer``: RGCN) and the limit
row's plain-DGL trainer (``limit_trainer``) share, written as DGL's examples do it.

Like the trainers it imports only the standard library, torch and dgl (no dsgraph code but the
phase clock, dsgraph.phases, the one instrument both sides are timed with; the tests check the
imports of all of them): the model stack, the connection, the collectives, the
epoch loop and its tally, the exact layer-wise inference and the metrics files.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import dgl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from dgl.dataloading import DistNodeDataLoader
from torch import nn

from dsgraph.phases import EpochPhases, epoch_record, phase


class StackedGNN(nn.Module):
    """``num_layers`` SAGEConv('mean') (``sage``) or GraphConv('both') (``gcn``) layers,
    ``in -> hidden -> ... -> out``, ReLU and dropout between them and none after the last: the
    architecture of dsgraph's ``models.gnn.GraphSAGE`` / ``GCN``."""

    def __init__(self, kind: str, in_feats: int, hidden: int, out_feats: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        sizes = [in_feats] + [hidden] * (num_layers - 1) + [out_feats]
        self.widths = sizes[1:]

        def layer(i: int, o: int) -> nn.Module:
            if kind == "gcn":
                return dgl.nn.GraphConv(i, o, norm="both", allow_zero_in_degree=True)
            return dgl.nn.SAGEConv(i, o, "mean")

        self.layers = nn.ModuleList(layer(i, o) for i, o in zip(sizes[:-1], sizes[1:]))
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


def ddp_sage(args: argparse.Namespace, in_feats: int, num_classes: int
             ) -> tuple[StackedGNN, nn.Module, torch.optim.Optimizer]:
    """The GraphSAGE stack of ``args`` seeded with ``--seed``, its DDP wrapper, and Adam."""
    torch.manual_seed(args.seed)
    net = StackedGNN("sage", in_feats, args.hidden, num_classes, args.num_layers, args.dropout)
    model = nn.parallel.DistributedDataParallel(net)
    return net, model, torch.optim.Adam(model.parameters(), lr=args.lr)


def seeds_line(name: str) -> Callable[[int, dict[str, Any]], str]:
    """The console line of a node-classification epoch of trainer ``name``."""
    return lambda epoch, rec: (f"{name} epoch {epoch}: {rec['samples_per_s']:.0f} seeds/s, "
                               f"loss {rec['loss']:.4f}, train_acc {rec['train_acc']:.4f}")


def add_common_args(p: argparse.ArgumentParser) -> None:
    """The options every stock trainer takes."""
    add_training_args(p)
    p.add_argument("--graph-name", default=None, help="default: graph_name of the partition JSON")
    p.add_argument("--phases", action="store_true",
                   help="time each epoch's phases into its record (dsgraph.phases)")


def add_training_args(p: argparse.ArgumentParser) -> None:
    """The options of every peer's training run (GraphStorm's trainer takes these too)."""
    p.add_argument("--run-dir", required=True, help="folder for stock_metrics.jsonl / summary")
    p.add_argument("--fanouts", default="10,25", help="comma list, one per layer")
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


def connect(args: argparse.Namespace) -> tuple[Any, dict]:
    """Join the DistGraph servers and the gloo group (in that order, as DGL does); the
    DistGraph and its partition JSON."""
    torch.set_num_threads(1)
    logging.getLogger("dgl-distributed-socket").setLevel(logging.ERROR)
    if args.gloo_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.gloo_ifname
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    dist.init_process_group("gloo")
    meta = json.loads(Path(os.environ["DGL_CONF_PATH"]).read_text())
    g = dgl.distributed.DistGraph(args.graph_name or meta["graph_name"],
                                  part_config=os.environ["DGL_CONF_PATH"])
    return g, meta


def disconnect() -> None:
    """Say goodbye to the servers (they exit once every trainer has) and leave the group."""
    dgl.distributed.exit_client()
    dist.destroy_process_group()


def all_reduce(values: list[float], op: dist.ReduceOp = dist.ReduceOp.SUM) -> list[float]:
    """``values`` reduced elementwise over all trainers (float64)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()


def timed_batches(loader: Iterable) -> Iterator:
    """``loader``'s mini-batches, the making of each (sampling and block building, in this
    process) timed as the ``sample`` phase while a profile runs (``--phases``)."""
    batches = iter(loader)
    while True:
        with phase("sample"):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


class EpochTally:
    """A classification epoch's clock and running sums (loss, correct, seeds, batches); its
    record is summed over all trainers. With ``profile`` it also times the epoch's phases
    (``phases`` of the record: dsgraph.phases, the instrument dsgraph's ``train.profile``
    uses; rank 0 reads the servers' CPU)."""

    def __init__(self, profile: bool = False) -> None:
        self.sums = [0.0, 0.0, 0.0, 0.0]
        self.phases = EpochPhases(dist.get_rank() == 0) if profile else None
        self.t0 = time.perf_counter()

    def batch(self, model: nn.Module, opt: torch.optim.Optimizer, blocks: list, feat: Any,
              label: Any, input_nodes: torch.Tensor, seeds: torch.Tensor) -> None:
        """One training step on a sampled batch: its input features and seed labels read from
        ``feat`` / ``label`` (DistTensors or in-memory), forward, :meth:`step`."""
        with phase("gather"):
            x, y = feat[input_nodes], label[seeds].long()
        with phase("forward"):
            out = model(blocks, x)
        self.step(opt, out, y)

    def step(self, opt: torch.optim.Optimizer, out: torch.Tensor, y: torch.Tensor) -> None:
        """Cross-entropy of ``out`` against ``y``, one optimizer step, the batch counted."""
        with phase("forward"):
            loss = F.cross_entropy(out, y)
        with phase("backward"):
            opt.zero_grad()
            loss.backward()
        with phase("optimizer"):
            opt.step()
        self.count(loss, out, y)

    def count(self, loss: torch.Tensor, out: torch.Tensor, y: torch.Tensor) -> None:
        """Add one batch to the sums: its mean ``loss``, the rows of ``out`` whose argmax is
        ``y``, its seeds."""
        n = float(y.numel())
        correct = float((out.detach().argmax(1) == y).sum())
        for i, v in enumerate((loss.item() * n, correct, n, 1.0)):
            self.sums[i] += v

    def record(self) -> dict[str, Any]:
        """Seeds per second (over the slowest trainer's loop), loop time, mean loss, training
        accuracy and batches, over all trainers. Collective: every trainer calls it."""
        spent = self.phases.values() if self.phases is not None else None
        loop_s = all_reduce([time.perf_counter() - self.t0], dist.ReduceOp.MAX)[0]
        tot = all_reduce(self.sums)
        return {"samples_per_s": tot[2] / loop_s, "epoch_s": loop_s,
                "loss": tot[0] / max(tot[2], 1.0), "train_acc": tot[1] / max(tot[2], 1.0),
                "batches": int(tot[3]),
                **(epoch_record(all_reduce(spent), tot[2]) if spent else {})}


# Label rows read per pull when counting classes (bounds each RPC message).
_LABEL_CHUNK = 1 << 16


def count_classes(label: Any, n: int, rank: int, world: int) -> int:
    """Max label + 1 of the ``n`` rows of DistTensor ``label``, read in chunks shared out over
    the trainers."""
    best = -1.0
    for a in range(rank * _LABEL_CHUNK, n, world * _LABEL_CHUNK):
        best = max(best, float(label[torch.arange(a, min(a + _LABEL_CHUNK, n))].max()))
    return int(all_reduce([best], dist.ReduceOp.MAX)[0]) + 1


@torch.no_grad()
def layerwise_inference(model: StackedGNN, g: Any, batch_size: int) -> Any:
    """Exact outputs of every node (a DistTensor): each layer over all neighbours, every trainer
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


def run_epochs(args: argparse.Namespace, rank: int, run_dir: Path,
               train_epoch: Callable[[], dict[str, Any]], rate_key: str,
               line: Callable[[int, dict[str, Any]], str],
               before: Optional[Callable[[], None]] = None) -> float:
    """The examples' epoch loop: per epoch, torch and DGL seeded from (``--seed``, rank, epoch),
    ``before()`` (a barrier, say), one ``train_epoch()``, its record appended to
    ``stock_metrics.jsonl`` and ``line(epoch, record)`` printed by rank 0. Returns the median
    ``rate_key`` over the epochs after the first (warm-up)."""
    metrics_path = run_dir / "stock_metrics.jsonl"
    if rank == 0:
        metrics_path.write_text("")
    rates = []
    for epoch in range(1, args.epochs + 1):
        epoch_seed = args.seed * 1000 + rank + epoch
        torch.manual_seed(epoch_seed)  # the loader's shuffle (and a link loader's negatives)
        dgl.seed(epoch_seed)  # neighbour sampling
        if before is not None:
            before()
        rec = {"epoch": epoch, **train_epoch()}
        rates.append(rec[rate_key])
        if rank == 0:
            append_metrics(metrics_path, rec)
            print(line(epoch, rec), flush=True)
    return statistics.median(rates[1:] or rates) if rates else 0.0


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """One epoch's line of ``stock_metrics.jsonl``."""
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` via a temporary file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)
