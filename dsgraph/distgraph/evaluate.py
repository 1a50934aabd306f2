"""Outputs over a DistGraph: exact layer-wise inference, or sampled inference for plug-in models;
the task's evaluation metrics and the per-node outputs ``python -m predict`` exports."""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Iterator, Optional

import dgl
import torch
from dgl.dataloading import DistNodeDataLoader
from dgl.distributed import DistTensor
from torch import nn

from dsgraph import dist
from dsgraph.errors import DataError
from dsgraph.models.gnn import SRC_OUT_DEGREES, capture_layer_input
from dsgraph.tasks import Task
from dsgraph.tasks.evaluation import split_figures

# Rows per pull when one trainer reads a whole DistTensor (bounds each RPC message).
_READ_ROWS = 1 << 16
# Edges per find_edges request when counting out-degrees (bounds the endpoint arrays).
_DEGREE_EDGES = 1 << 20


def all_nodes(g) -> torch.Tensor:
    """This trainer's share of every node of ``g`` (each node in exactly one share): nodes its
    own machine's partition holds.

    Their outputs are then written into a DistTensor in this machine's shared memory, visible
    to every trainer after a barrier. A row owned by another machine would be a push that DGL
    sends without waiting for it to be applied (``KVClient.push``), so the next layer could read
    it stale: with DGL's even split (a few nodes of the other partition) a prediction differed
    from the evaluation that chose its model in 1 of 3 runs (RMSE 1.3130 vs 1.3135).
    """
    return dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool),
                                      g.get_partition_book(), force_even=False)


def out_degrees(g) -> torch.Tensor:
    """Every node's out-degree in the whole graph (collective: each trainer counts the sources
    of its share of its partition's edges, then the counts are summed).

    ``DistGraph.out_degrees`` counts only the out-edges stored in the node's own partition
    (DGL 2.1 ``graph_services._out_degrees``): a partition stores its nodes' in-edges, plus
    its halo's with 2-hop halos, so the count misses edges into other partitions and depends
    on the halo depth.
    """
    mine = dgl.distributed.edge_split(torch.ones(g.num_edges(), dtype=torch.bool),
                                      g.get_partition_book(), force_even=False)
    degrees = torch.zeros(g.num_nodes(), dtype=torch.int64)
    for a in range(0, mine.numel(), _DEGREE_EDGES):
        src, _ = g.find_edges(mine[a:a + _DEGREE_EDGES])
        degrees.index_add_(0, src, torch.ones_like(src))
    return dist.all_sum_(degrees)


def _stream(g, batches: Iterator[tuple[torch.Tensor, ...]], sinks: int) -> list[DistTensor]:
    """``sinks`` new DistTensors over all nodes holding the rows of ``batches`` (node ids, then
    one row tensor per sink), written batch by batch so a layer's outputs are never all held in
    the trainer (collective). A trainer without nodes learns each width from the others; rows
    are float32, as DistGraph serves."""
    first = next(batches, None)
    out = []
    for i in range(sinks):
        rows = first[1 + i] if first is not None else None
        width = int(dist.all_max([float(rows.shape[1]) if rows is not None else 0.0])[0])
        out.append(DistTensor((g.num_nodes(), width),
                              rows.dtype if rows is not None else torch.float32,
                              persistent=False))
    if first is not None:
        for nodes, *rows in itertools.chain([first], batches):
            for t, r in zip(out, rows):
                t[nodes] = r
    return out


@torch.no_grad()
def layerwise_outputs(model: nn.Module, g, batch_size: int, hidden: bool = False
                      ) -> tuple[DistTensor, Optional[DistTensor]]:
    """Exact logits of every node (a DistTensor), each layer computed over all neighbours,
    and with ``hidden`` the input of the last layer (the embedding; else None).

    Each trainer computes its share of every layer into a DistTensor; the next layer reads its
    inputs (local or remote) from there. Needs ``model.num_layers`` and ``model.forward_layer``.
    Collective: every trainer calls it, and keeps the results alive until all have read them.
    """
    everyone = all_nodes(g)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    h_in, last_in = g.ndata["feat"], None
    degrees = out_degrees(g)

    def layer(i: int, in_nodes: torch.Tensor, block) -> torch.Tensor:
        block.srcdata[SRC_OUT_DEGREES] = degrees[in_nodes]  # the graph's, not the batch's
        return model.forward_layer(i, block, h_in[in_nodes])

    for i in range(model.num_layers):
        loader = DistNodeDataLoader(g, everyone, sampler, batch_size=batch_size, shuffle=False)
        h_out, = _stream(g, ((out_nodes, layer(i, in_nodes, blocks[0]))
                             for in_nodes, out_nodes, blocks in loader), 1)
        dist.barrier()  # every share written before anyone reads this layer
        if hidden and i == model.num_layers - 1:
            last_in = h_in
        h_in = h_out
    return h_in, last_in


@torch.no_grad()
def sampled_outputs(model: nn.Module, g, fanouts: list[int], batch_size: int,
                    hidden: bool = False) -> tuple[DistTensor, Optional[DistTensor]]:
    """Logits of every node from neighbourhoods sampled with ``fanouts`` (models without
    ``forward_layer``; not exact), and with ``hidden`` the input of ``model.layers[-1]``.
    Collective, as :func:`layerwise_outputs`."""
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = DistNodeDataLoader(g, all_nodes(g), sampler, batch_size=batch_size, shuffle=False)
    with capture_layer_input(model) if hidden else contextlib.nullcontext([]) as captured:
        def batches():
            for input_nodes, seeds, blocks in loader:
                logits = model(blocks, g.ndata["feat"][input_nodes])
                yield (seeds, logits, captured.pop()[:seeds.numel()]) if hidden \
                    else (seeds, logits)

        tensors = _stream(g, batches(), 2 if hidden else 1)
    dist.barrier()
    return tensors[0], (tensors[1] if hidden else None)


def read_all(t) -> torch.Tensor:
    """Every row of a DistTensor, in node-id order, read by this trainer alone."""
    n = t.shape[0]
    return torch.cat([t[torch.arange(a, min(a + _READ_ROWS, n))] for a in range(0, n, _READ_ROWS)])


@torch.no_grad()
def node_outputs(model: nn.Module, g, rank: int, layerwise: bool, fanouts: list[int],
                 batch_size: int, hidden: bool = False) -> Optional[dict[str, torch.Tensor]]:
    """Rank 0: ``node_id`` (original ids), ``logits`` and with ``hidden`` ``embedding`` of every
    node, in node-id order of the partitioned graph; other ranks None. Collective."""
    if "orig_id" not in g.ndata:
        raise DataError("the partitions hold no _N/orig_id, so outputs cannot be keyed by the "
                        "original node ids; re-partition with `python -m partition`")
    if layerwise:
        logits, emb = layerwise_outputs(model, g, batch_size, hidden)
    else:
        logits, emb = sampled_outputs(model, g, fanouts, batch_size, hidden)
    out = None
    if rank == 0:
        out = {"node_id": read_all(g.ndata["orig_id"]), "logits": read_all(logits)}
        if emb is not None:
            out["embedding"] = read_all(emb)
    dist.barrier()  # the DistTensors must outlive rank 0's reads
    return out


@torch.no_grad()
def split_metrics(model: nn.Module, g, task: Task, nodes: dict[str, torch.Tensor],
                  layerwise: bool, fanouts: list[int], batch_size: int) -> dict[str, Any]:
    """The task's ``<split>_<metric>`` of every split in ``nodes`` (this rank's share) over all
    ranks (:func:`dsgraph.tasks.evaluation.split_figures`).

    ``layerwise`` uses :func:`layerwise_outputs` (exact); otherwise each split is sampled with
    ``fanouts``, as in training.
    """
    label = g.ndata["label"]
    parts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    if layerwise:
        logits = layerwise_outputs(model, g, batch_size)[0]
        for name, ids in nodes.items():
            parts[name] = (logits[ids], task.target(label[ids]))
    else:
        sampler = dgl.dataloading.NeighborSampler(fanouts)
        for name, ids in nodes.items():
            loader = dgl.dataloading.DistNodeDataLoader(g, ids, sampler, batch_size=batch_size)
            outs, targets = [], []
            for input_nodes, seeds, blocks in loader:
                outs.append(model(blocks, g.ndata["feat"][input_nodes]))
                targets.append(task.target(label[seeds]))
            if not outs:  # no node of this split on this rank: empty rows of the right shapes
                outs = [torch.zeros(0, task.head_width(task.width))]
                targets = [task.target(torch.zeros((0, *label.shape[1:]), dtype=label.dtype))]
            parts[name] = (torch.cat(outs), torch.cat(targets))
    return split_figures(task, parts)
