"""Input rows of a heterogeneous mini-batch: each node type's ``feat`` read from DistGraph, or,
for a type without features, a learnable embedding held by the DistGraph servers.

Feature rows are read as the homogeneous trainer reads them (:mod:`dsgraph.distgraph.features`,
one reader per type): own rows from the server's shared memory, remote rows from a cache within
the trainer's ``sampled.feature_memory_mb`` (quantized to ``sampled.feature_cache_bits``), the
rest over RPC. One budget covers every type: the remote rows read most often in pre-sampled
mini-batches, per cached byte, fill it (:meth:`HeteroInputs.fill_caches`).

The embeddings are DGL ``DistEmbedding`` tables (one per featureless type, rows partitioned like
the type's nodes), updated sparsely by DGL's distributed ``SparseAdam`` as DGL's distributed
RGCN example does: a trainer never holds a whole table. Their initial rows are a function of
``train.seed``, the type and the node's original id (:func:`seeded_rows`), written by the
trainers of the owning partition: the same seed starts every run, on any partitioning, from the
same table (DGL's own initialiser runs unseeded in the servers). They are part of the model's
state (:meth:`HeteroInputs.get_extra_state`) so a checkpoint, a resumed run and
``python -m predict`` see the trained rows; the sparse optimizer's moments are not checkpointed.

Every write here is to rows the writer's own partition owns (shared memory of its machine,
applied before the call returns); a push to another machine's rows would only be sent, not
applied, when the call returns (DGL's ``KVClient.push``). Readers on other trainers are ordered
after the writers by a collective barrier: :meth:`HeteroInputs.seed_tables` and
:meth:`HeteroInputs.set_extra_state` end with one.
"""
from __future__ import annotations

import zlib
from typing import Any, Iterable, Optional

import dgl
import numpy as np
import torch
from torch import nn

from dsgraph import dist
from dsgraph.distgraph.budget import cache_row_bytes
from dsgraph.distgraph.features import CachedFeatures
from dsgraph.remat import HeteroRematBlock

# Rows read per request when a checkpoint gathers or restores an embedding table.
STATE_CHUNK_ROWS = 1 << 18


# Rows drawn per pass when the trainers write a table's initial rows (bounds the hash's arrays).
SEED_CHUNK_ROWS = 1 << 14
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 whose outputs look independent."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def seeded_rows(seed: int, ntype: str, orig_ids: torch.Tensor, dim: int) -> torch.Tensor:
    """Initial embedding rows of nodes ``orig_ids`` of ``ntype``: uniform in [-1, 1) (as DGL's
    RGCN example initialises them), each value a hash of (seed, type, original id, column), so
    a row does not depend on which trainer writes it or how the graph is partitioned."""
    key = _mix(np.array([seed & (2**64 - 1)], dtype=np.uint64)
               ^ np.uint64(zlib.crc32(ntype.encode())))
    ids = orig_ids.numpy().astype(np.uint64)[:, None] * np.uint64(dim) \
        + np.arange(dim, dtype=np.uint64)[None, :]
    bits = _mix(key + (ids + np.uint64(1)) * _GOLDEN) >> np.uint64(11)  # 53 random bits
    return torch.from_numpy(bits.astype(np.float64) * 2.0 ** -52 - 1.0).float()


def _zeros(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """DistEmbedding's server-side initialiser: zeros (the trainers write the seeded rows)."""
    return torch.zeros(shape, dtype=dtype)


class HeteroInputs(nn.Module):
    """``forward(input_nodes)``: ``{ntype: rows}`` of a batch's input nodes (per-type ids)."""

    def __init__(self, g, embedding_dim: int) -> None:
        super().__init__()
        self.g = g
        self.features = {t: CachedFeatures(g, "feat", t) for t in g.ntypes
                         if "feat" in g.nodes[t].data}
        self.embeddings = {
            t: dgl.distributed.DistEmbedding(g.num_nodes(t), embedding_dim, name=f"embed-{t}",
                                             init_func=_zeros,
                                             part_policy=g.get_node_partition_policy(t))
            for t in g.ntypes if t not in self.features}

    def seed_tables(self, seed: int) -> None:
        """Write the initial rows (:func:`seeded_rows`) of this partition's nodes into every
        embedding table, then wait until every partition's are written (collective)."""
        pb = self.g.get_partition_book()
        for t, emb in self.embeddings.items():
            ids = pb.partid2nids(pb.partid, t)
            orig = self.g.nodes[t].data["orig_id"] if "orig_id" in self.g.nodes[t].data else None
            for i in range(0, ids.numel(), SEED_CHUNK_ROWS):
                chunk = ids[i:i + SEED_CHUNK_ROWS]
                keys = orig[chunk].to(torch.int64) if orig is not None else chunk
                emb.weight[chunk] = seeded_rows(seed, t, keys, emb.embedding_dim)
        dist.barrier()  # every partition's rows written before any trainer reads one

    @property
    def widths(self) -> dict[str, int]:
        """Input width of every node type (a model's ``in_feats``)."""
        return {**{t: f.width for t, f in self.features.items()},
                **{t: int(e.embedding_dim) for t, e in self.embeddings.items()}}

    def own_feature_bytes(self) -> int:
        """Bytes of the feature rows this trainer's partition owns, over every type."""
        pb = self.g.get_partition_book()
        return sum(int(pb.partid2nids(pb.partid, t).numel()) * f.row_bytes
                   for t, f in self.features.items())

    def fill_caches(self, presampled: Iterable[dict[str, torch.Tensor]], budget_bytes: int,
                    bits: int) -> None:
        """Cache the remote feature rows read most often in ``presampled`` batches' input nodes,
        over every type, ranked by reads per cached byte, within ``budget_bytes`` in all."""
        pb = self.g.get_partition_book()
        counts = {t: torch.zeros(self.g.num_nodes(t), dtype=torch.int64) for t in self.features}
        for batch in presampled:
            for t, ids in batch.items():
                if t in counts and ids.numel():
                    counts[t] += torch.bincount(ids, minlength=counts[t].numel())
        ranked, scores, costs = [], [], []
        for t, feat in self.features.items():
            read = counts[t].nonzero().squeeze(1)
            remote = read[pb.nid2partid(read, t) != pb.partid]
            per_row = cache_row_bytes(feat.width, bits, feat.row_bytes // feat.width)
            ranked.append(remote)
            scores.append(counts[t][remote].double() / per_row)
            costs.append(torch.full((remote.numel(),), per_row, dtype=torch.int64))
        order = torch.argsort(torch.cat(scores), descending=True, stable=True)
        chosen = order[torch.cumsum(torch.cat(costs)[order], 0) <= budget_bytes]
        start = 0
        for (t, feat), ids, cost in zip(self.features.items(), ranked, costs):
            mine = chosen[(chosen >= start) & (chosen < start + ids.numel())] - start
            start += ids.numel()
            if mine.numel():  # in rank order, so fill keeps the most read first
                feat.fill(ids[mine], int(mine.numel() * cost[0]), bits)

    def cache_figures(self) -> tuple[int, int, int]:
        """(bytes read over RPC, remote rows served by the caches, remote rows read) since the
        last :meth:`reset_figures`, over every type."""
        f = self.features.values()
        return (sum(x.remote_rows * x.row_bytes for x in f), sum(x.cache_hits for x in f),
                sum(x.cache_hits + x.remote_rows for x in f))

    def reset_figures(self) -> None:
        """Start counting :meth:`cache_figures` anew."""
        for f in self.features.values():
            f.remote_rows = f.cache_hits = 0

    @property
    def cache_bytes(self) -> int:
        """Bytes the caches hold, ids included."""
        return sum(f.cache_bytes for f in self.features.values())

    def sparse_optimizer(self, lr: float) -> Optional[Any]:
        """DGL's distributed SparseAdam over the embeddings (None without featureless types).
        Its ``step`` is collective: every trainer calls it once per batch."""
        if not self.embeddings:
            return None
        return dgl.distributed.optim.SparseAdam(list(self.embeddings.values()), lr=lr)

    def forward(self, input_nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The rows of every type's input nodes; embedding rows record their gradient trace
        only while training."""
        x = {}
        for t, ids in input_nodes.items():
            if t in self.features:
                x[t] = self.features[t][ids]
            elif self.training:
                x[t] = self.embeddings[t](ids)
            else:  # evaluation: read the rows without adding to the optimizer's trace
                x[t] = self.embeddings[t].weight[ids]
        return x

    def get_extra_state(self) -> dict[str, torch.Tensor]:
        """Every embedding table, whole (read from the servers in chunks)."""
        state = {}
        for t, emb in self.embeddings.items():
            n = emb.num_embeddings
            state[t] = torch.cat([emb.weight[torch.arange(i, min(i + STATE_CHUNK_ROWS, n))]
                                  for i in range(0, n, STATE_CHUNK_ROWS)]) if n else \
                torch.zeros(0, emb.embedding_dim)
        return state

    def set_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        """Write this trainer's partition's rows of every table back to the servers (every
        partition's trainers write their own, so the whole table is restored), then wait until
        every partition's are (collective: a trainer reads other partitions' rows next)."""
        pb = self.g.get_partition_book()
        for t, emb in self.embeddings.items():
            rows = state[t]
            if rows.shape != (emb.num_embeddings, emb.embedding_dim):
                raise ValueError(f"embedding of node type {t!r}: expected a checkpointed table "
                                 f"of shape {(emb.num_embeddings, emb.embedding_dim)}, got "
                                 f"{tuple(rows.shape)}")
            ids = pb.partid2nids(pb.partid, t)
            for i in range(0, ids.numel(), STATE_CHUNK_ROWS):
                chunk = ids[i:i + STATE_CHUNK_ROWS]
                emb.weight[chunk] = rows[chunk]
        dist.barrier()  # the restored table complete before any trainer reads from it


class HeteroNet(nn.Module):
    """The trained module: :class:`HeteroInputs` then the user's relational model; returns the
    target type's output rows."""

    def __init__(self, inputs: HeteroInputs, model: nn.Module, target: str) -> None:
        super().__init__()
        self.inputs, self.model, self.target = inputs, model, target

    def forward(self, blocks, input_nodes: dict[str, torch.Tensor]) -> torch.Tensor:
        """Output rows of the batch's target-type seeds (a rematerialized first block: the
        featured types' destination rows only, see :mod:`dsgraph.remat.hetero`)."""
        if isinstance(blocks[0], HeteroRematBlock):
            input_nodes = blocks[0].input_rows(input_nodes)
        out = self.model(blocks, self.inputs(input_nodes))
        return out[self.target] if isinstance(out, dict) else out
