"""A DistGraph (DGL's standalone mode, one partition) on which stock neighbour sampling and
:class:`~dsgraph.distgraph.link_sampler.PairExcludingSampler` (over RPC, and over the local
partition as with ``sampled.local_sampling``) are asked to leave out a batch's
edges; prints how many of them (either direction) each one's blocks still hold.

``python -m tests.dist.link_exclusion_case FOLDER``, or :func:`main` in a process of its own
(DGL's distributed state is per process)."""
from __future__ import annotations

import os
import sys

os.environ["DGL_DIST_MODE"] = "standalone"

import dgl  # noqa: E402
import torch  # noqa: E402

from dsgraph.config import DatasetConfig  # noqa: E402
from dsgraph.data.link_split import pair_keys  # noqa: E402
from dsgraph.data.synthetic import generate  # noqa: E402
from dsgraph.distgraph.link_sampler import PairExcludingSampler  # noqa: E402
from dsgraph.distgraph.local_sampler import LocalIndex, local_frontier  # noqa: E402
from dsgraph.partition import partition_graph  # noqa: E402


def kept(g, blocks: list, banned: set[int]) -> int:
    """Edges of ``blocks`` whose unordered pair is in ``banned``."""
    n = 0
    for block in blocks:
        s, d = block.edges()
        keys = pair_keys(block.srcdata[dgl.NID][s].numpy(), block.dstdata[dgl.NID][d].numpy(),
                         g.num_nodes())
        n += len(banned & set(keys.tolist()))
    return n


def main(out: str) -> None:
    """Partition a small graph into ``out``, open it as a DistGraph, sample both ways."""
    g = generate(DatasetConfig(num_nodes=300, avg_degree=8.0, num_classes=4, feat_dim=4, seed=0))
    path = partition_graph(g, 1, os.path.join(out, "parts"), method="random")
    ip = os.path.join(out, "ip.txt")
    with open(ip, "w") as fh:
        fh.write("127.0.0.1\n")
    dgl.distributed.initialize(ip)
    dg = dgl.distributed.DistGraph("graph", part_config=str(path))
    eids = torch.arange(0, 100)
    src, dst = dg.find_edges(eids)
    banned = set(pair_keys(src.numpy(), dst.numpy(), dg.num_nodes()).tolist())
    seeds = torch.unique(torch.cat([src, dst]))
    stock = dgl.dataloading.NeighborSampler([50, 50]).sample_blocks(dg, seeds, exclude_eids=eids)
    pairs = torch.stack([src, dst], 1)
    ours = PairExcludingSampler([50, 50]).sample_pairs(dg, seeds, pairs)
    index = LocalIndex.build(dg)  # the edge batches' sampler with sampled.local_sampling
    local = PairExcludingSampler([50, 50], lambda g, s, f: local_frontier(g, index, s, f))
    sampled = local.sample_pairs(dg, seeds, pairs)[2]
    edges = sum(b.num_edges() for b in sampled)
    print(f"stock {kept(dg, stock[2], banned)} ours {kept(dg, ours[2], banned)} "
          f"local {kept(dg, sampled, banned)} sampled {edges}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
