"""Outputs over a DistGraph: exact layer-wise inference, or sampled inference for plug-in models;
the task's evaluation metrics and the per-node outputs ``python -m predict`` exports."""
from __future__ import annotations

import contextlib
from typing import Any, Optional

import dgl
import torch
from dgl.dataloading import DistNodeDataLoader
from dgl.distributed import DistTensor
from torch import nn

from dsgraph import dist
from dsgraph.errors import DataError
from dsgraph.models.gnn import capture_layer_input
from dsgraph.tasks import Task

# Rows per pull when one trainer reads a whole DistTensor (bounds each RPC message).
_READ_ROWS = 1 << 16


def all_nodes(g) -> torch.Tensor:
    """This trainer's share of every node of ``g`` (each node in exactly one share)."""
    return dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool),
                                      g.get_partition_book(), force_even=True)


def _to_dist_tensor(g, outs: list[tuple[torch.Tensor, torch.Tensor]]) -> DistTensor:
    """A new DistTensor over all nodes holding this trainer's rows ``outs`` (collective)."""
    # force_even gives every trainer nodes, so each knows the width and dtype here.
    ref = outs[0][1]
    t = DistTensor((g.num_nodes(), ref.shape[1]), ref.dtype, persistent=False)
    for nodes, rows in outs:
        t[nodes] = rows
    return t


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
    for i in range(model.num_layers):
        loader = DistNodeDataLoader(g, everyone, sampler, batch_size=batch_size, shuffle=False)
        outs = [(out_nodes, model.forward_layer(i, blocks[0], h_in[in_nodes]))
                for in_nodes, out_nodes, blocks in loader]
        h_out = _to_dist_tensor(g, outs)
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
    logits, embedding = [], []
    with capture_layer_input(model) if hidden else contextlib.nullcontext([]) as captured:
        for input_nodes, seeds, blocks in loader:
            logits.append((seeds, model(blocks, g.ndata["feat"][input_nodes])))
            if hidden:
                embedding.append((seeds, captured.pop()[:seeds.numel()]))
    out = _to_dist_tensor(g, logits), (_to_dist_tensor(g, embedding) if hidden else None)
    dist.barrier()
    return out


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
    """The task's ``<split>_<metric>`` of every split in ``nodes`` (this rank's share), sums
    added over ranks.

    ``layerwise`` uses :func:`layerwise_outputs` (exact); otherwise each split is sampled with
    ``fanouts``, as in training.
    """
    sums: list[float] = []
    if layerwise:
        logits = layerwise_outputs(model, g, batch_size)[0]
        for ids in nodes.values():
            sums += task.metric_sums(logits[ids], g.ndata["label"][ids])
    else:
        sampler = dgl.dataloading.NeighborSampler(fanouts)
        for ids in nodes.values():
            loader = dgl.dataloading.DistNodeDataLoader(g, ids, sampler, batch_size=batch_size)
            split = [0.0] * task.num_sums
            for input_nodes, seeds, blocks in loader:
                out = model(blocks, g.ndata["feat"][input_nodes])
                got = task.metric_sums(out, g.ndata["label"][seeds])
                split = [a + b for a, b in zip(split, got)]
            sums += split
    return task.split_metrics(dist.all_sum(sums), list(nodes))
