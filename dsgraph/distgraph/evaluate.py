"""Accuracy over a DistGraph: exact layer-wise inference, or sampled inference for plug-in models."""
from __future__ import annotations

import dgl
import torch
from dgl.dataloading import DistNodeDataLoader
from dgl.distributed import DistTensor
from torch import nn

from dsgraph import dist


@torch.no_grad()
def layerwise_logits(model: nn.Module, g, batch_size: int):
    """Exact logits of every node (a DistTensor): each layer computed over all neighbours.

    Each trainer computes its share of every layer into a DistTensor; the next layer reads its
    inputs (local or remote) from there. Needs ``model.num_layers`` and ``model.forward_layer``.
    """

    pb = g.get_partition_book()
    everyone = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), pb,
                                          force_even=True)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    h_in = g.ndata["feat"]
    for i in range(model.num_layers):
        loader = DistNodeDataLoader(g, everyone, sampler, batch_size=batch_size, shuffle=False)
        outs = [(out_nodes, model.forward_layer(i, blocks[0], h_in[in_nodes]))
                for in_nodes, out_nodes, blocks in loader]
        # force_even gives every trainer nodes, so each knows the layer's width here.
        h_out = DistTensor((g.num_nodes(), outs[0][1].shape[1]), torch.float32, persistent=False)
        for out_nodes, out in outs:
            h_out[out_nodes] = out
        dist.barrier()
        h_in = h_out
    return h_in


@torch.no_grad()
def accuracy(model: nn.Module, g, nodes: dict[str, torch.Tensor], layerwise: bool,
             fanouts: list[int], batch_size: int) -> dict[str, float]:
    """``<split>_acc`` of every split in ``nodes`` (this rank's share), counts summed over ranks.

    ``layerwise`` uses :func:`layerwise_logits` (exact); otherwise each split is sampled with
    ``fanouts``, as in training.
    """

    counts: list[float] = []
    if layerwise:
        logits = layerwise_logits(model, g, batch_size)
        for ids in nodes.values():
            counts += [float((logits[ids].argmax(1) == g.ndata["label"][ids]).sum()), ids.numel()]
    else:
        sampler = dgl.dataloading.NeighborSampler(fanouts)
        for ids in nodes.values():
            loader = dgl.dataloading.DistNodeDataLoader(g, ids, sampler, batch_size=batch_size)
            correct = seen = 0
            for input_nodes, seeds, blocks in loader:
                out = model(blocks, g.ndata["feat"][input_nodes])
                correct += int((out.argmax(1) == g.ndata["label"][seeds]).sum())
                seen += seeds.numel()
            counts += [correct, seen]
    total = dist.all_sum(counts)
    return {f"{name}_acc": total[2 * i] / max(total[2 * i + 1], 1.0)
            for i, name in enumerate(nodes)}
