"""Read partition files back (layout: :mod:`dsgraph.partition.format`): one worker's part, orig ids."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import dgl
import torch
from dgl.data.utils import load_tensors

from dsgraph.errors import DataError, UserError

NODE_KEYS = ("feat", "label", "train_mask", "val_mask", "test_mask", "orig_id")


@dataclass
class LocalPartition:
    """A worker's inner nodes (reshuffled id order), their data and their in-edges."""

    rank: int
    num_parts: int
    node_ranges: torch.Tensor  # [num_parts + 1]: part p owns global ids [r[p], r[p+1])
    src: torch.Tensor  # global (reshuffled) id of each local in-edge's source, int64
    dst: torch.Tensor  # local id (0..num_local-1) of each local in-edge's destination, int64
    ndata: dict[str, torch.Tensor]  # NODE_KEYS present in node_feat.dgl, one row per inner node

    @property
    def num_local(self) -> int:
        """Number of nodes this worker owns."""
        return int(self.node_ranges[self.rank + 1] - self.node_ranges[self.rank])

    @property
    def num_global(self) -> int:
        """Number of nodes in the whole graph."""
        return int(self.node_ranges[-1])


def partition_json(cfg) -> Path:
    """The partition JSON a run reads (``partition.out_dir``/``graph_name``.json), checked to
    exist and to hold ``partition.num_parts`` parts; ``cfg`` is a :class:`dsgraph.config.Config`."""
    p = cfg.partition
    path = Path(p.out_dir) / f"{p.graph_name}.json"
    if not path.is_file():
        raise UserError(f"{path}: partition files not found; run `python -m partition --config "
                        f"{cfg.source}` (or `make partition`) first")
    try:
        parts = int(json.loads(path.read_text())["num_parts"])
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{path}: not a DGL partition JSON (no num_parts)") from None
    if parts != p.num_parts:
        raise UserError(f"{path}: holds {parts} parts but partition.num_parts is {p.num_parts}; "
                        f"re-run `python -m partition --config {cfg.source}`")
    return path


def _node_ranges(meta: dict, part_json: Path) -> torch.Tensor:
    """``node_map`` as part boundaries ``[r0, r1, ..., r_P]``; DataError unless one contiguous type."""
    node_map = meta.get("node_map")
    if not isinstance(node_map, dict) or len(node_map) != 1:
        raise DataError(f"{part_json}: node_map: expected one node type (a homogeneous graph), "
                        f"got {list(node_map) if isinstance(node_map, dict) else node_map!r}")
    ranges = next(iter(node_map.values()))
    bounds = [int(ranges[0][0])] + [int(r[1]) for r in ranges]
    for a, b in zip(ranges[:-1], ranges[1:]):
        if int(a[1]) != int(b[0]):
            raise DataError(f"{part_json}: node_map: expected contiguous id ranges, got {ranges}")
    return torch.tensor(bounds, dtype=torch.int64)


def load_local_partition(part_json: str | Path, rank: int, world_size: int) -> LocalPartition:
    """Read part ``rank`` of ``part_json``: inner-node data and the in-edges of inner nodes."""
    part_json = Path(part_json)
    if not part_json.is_file():
        raise DataError(f"{part_json}: partition JSON not found (run `python -m partition` first)")
    meta = json.loads(part_json.read_text())
    num_parts = int(meta.get("num_parts", -1))
    if num_parts != world_size:
        raise DataError(f"{part_json}: num_parts: the job has {world_size} workers, expected a "
                        f"partitioning into {world_size} parts, got {num_parts}")
    if int(meta.get("halo_hops", 1)) < 1:
        raise DataError(f"{part_json}: halo_hops: expected >= 1, got {meta.get('halo_hops')}")
    ranges = _node_ranges(meta, part_json)
    graph, node_feats = dgl.distributed.load_partition(str(part_json), rank)[:2]
    inner = graph.ndata["inner_node"].bool()
    n_inner = int(inner.sum())
    if n_inner != int(ranges[rank + 1] - ranges[rank]) or not bool(inner[:n_inner].all()):
        raise DataError(f"{part_json}: part {rank}: inner nodes are not the first "
                        f"{int(ranges[rank + 1] - ranges[rank])} local nodes (not a reshuffled "
                        f"stock partition)")
    gid = graph.ndata[dgl.NID]
    s, d = graph.edges()
    keep = inner[d]  # an edge belongs to its destination's part
    src = gid[s[keep]].to(torch.int64)
    dst = d[keep].to(torch.int64)
    del graph, s, d, keep, gid
    ndata: dict[str, torch.Tensor] = {}
    for key, value in node_feats.items():
        name = key.split("/", 1)[-1]
        if name in NODE_KEYS:
            ndata[name] = value.bool() if name.endswith("_mask") else value
    for name in ("feat", "label", "train_mask"):
        if name not in ndata:
            raise DataError(f"{part_json}: part {rank}: node_feat.dgl has no '_N/{name}' "
                            f"(found {sorted(node_feats)})")
    if "orig_id" not in ndata:  # without it results cannot be mapped back; reshuffled ids remain
        ndata["orig_id"] = torch.arange(int(ranges[rank]), int(ranges[rank + 1]))
    return LocalPartition(rank, num_parts, ranges, src, dst, ndata)


def orig_ids(part_config: str | os.PathLike) -> torch.Tensor:
    """``orig[new_id] = original id`` for the whole graph, from every part's node features."""
    cfg_path = Path(part_config)
    meta = json.loads(cfg_path.read_text())
    return torch.cat([load_tensors(str(cfg_path.parent / meta[f"part-{k}"]["node_feats"]))["_N/orig_id"]
                      for k in range(meta["num_parts"])])
