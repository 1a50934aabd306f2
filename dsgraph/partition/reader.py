"""Read partition files back (layout: :mod:`dsgraph.partition.format`): one worker's part, orig ids.

Every reader verifies first (:mod:`dsgraph.partition.integrity`): the JSON's keys, each file's
size and sha256, the config that made the files, so a bad partition is one line naming the file
or setting, never a DGL traceback or a silent run on altered data.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import dgl
import torch
from dgl.data.utils import load_tensors

from dsgraph.errors import DataError, UserError
from dsgraph.partition.integrity import part_files, verify_files, verify_partitions
from dsgraph.partition.meta import read_meta

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


def partition_json(cfg, check_files: bool = True) -> Path:
    """The partition JSON a run reads (``partition.out_dir``/``graph_name``.json), verified.

    ``cfg`` is a :class:`dsgraph.config.Config`. Checks that the JSON parses and holds what
    dsgraph needs, that it was made with the run's ``partition.num_parts`` and dataset and
    partition settings, and (``check_files``) that every file it lists has its recorded size
    and sha256. Raises one-line :class:`DataError` / :class:`UserError` otherwise.
    """
    p = cfg.partition
    path = Path(p.out_dir) / f"{p.graph_name}.json"
    if not path.is_file():
        raise UserError(f"{path}: partition files not found; run `python -m partition --config "
                        f"{cfg.source}` (or `make partition`) first")
    verify_partitions(path, cfg, check_files)
    return path


def _node_ranges(meta: dict) -> torch.Tensor:
    """``node_map`` (validated by :func:`read_meta`) as part boundaries ``[0, r1, ..., r_P]``
    (a heterogeneous map: where each part's last type range ends)."""
    maps = list(meta["node_map"].values())
    return torch.tensor([0] + [max(m[k][1] for m in maps) for k in range(meta["num_parts"])],
                        dtype=torch.int64)


def load_local_partition(part_json: str | Path, rank: int, world_size: int) -> LocalPartition:
    """Read part ``rank`` of ``part_json``: inner-node data and the in-edges of inner nodes.

    Verifies the JSON, the size of every part's files and the sha256 of this part's own files
    before DGL reads them.
    """
    part_json = Path(part_json)
    meta = read_meta(part_json)
    num_parts = meta["num_parts"]
    if num_parts != world_size:
        raise DataError(f"{part_json}: num_parts: the job has {world_size} workers, expected a "
                        f"partitioning into {world_size} parts, got {num_parts}")
    if len(meta["ntypes"]) > 1:  # its node_feat.dgl holds <ntype>/<key>, no _N/ keys
        raise DataError(f"{part_json}: ntypes: expected one node type (a homogeneous graph) for "
                        f"full-graph training, got {len(meta['ntypes'])} "
                        f"({', '.join(meta['ntypes'])})")
    verify_files(part_json, meta, checksum=part_files(meta, rank))
    ranges = _node_ranges(meta)
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
    """``orig[new_id] = original id`` for the whole graph, from every part's node features (a
    heterogeneous partitioning: homogeneous ids, originals in ``dgl.to_homogeneous`` order)."""
    cfg_path = Path(part_config)
    meta = read_meta(cfg_path)
    order = sorted(meta["ntypes"], key=meta["ntypes"].get)
    sizes = [sum(hi - lo for lo, hi in meta["node_map"][t]) for t in order]
    offsets = [sum(sizes[:i]) for i in range(len(order))]  # where each type's ids start
    keys = [f"{t}/orig_id" for t in order]
    # reshuffled ids are part-major, type-major within a part
    return torch.cat([rows[key] + off for rows in _orig_id_rows(cfg_path, meta, keys)
                      for key, off in zip(keys, offsets)])


def orig_ids_per_type(part_config: str | os.PathLike) -> dict[str, torch.Tensor]:
    """``orig[ntype][new per-type id] = original per-type id`` for every node type (the ids
    ``g.nodes[ntype]`` of a DistGraph uses), from every part's ``<ntype>/orig_id``."""
    cfg_path = Path(part_config)
    meta = read_meta(cfg_path)
    order = sorted(meta["ntypes"], key=meta["ntypes"].get)
    parts = _orig_id_rows(cfg_path, meta, [f"{t}/orig_id" for t in order])
    return {t: torch.cat([rows[f"{t}/orig_id"] for rows in parts]) for t in order}


def _orig_id_rows(cfg_path: Path, meta: dict, keys: list[str]) -> list[dict[str, torch.Tensor]]:
    """``keys`` of every part's node_feat.dgl, in part order (each file's size and sha256
    verified first); one-line DataError for a missing key."""
    feats = [meta[f"part-{k}"]["node_feats"] for k in range(meta["num_parts"])]
    verify_files(cfg_path, meta, feats, checksum=feats)
    out = []
    for k, rel in enumerate(feats):
        tensors = load_tensors(str(cfg_path.parent / rel))  # one file in memory at a time
        missing = [key for key in keys if key not in tensors]
        if missing:
            raise DataError(f"{cfg_path.parent / rel}: part {k}: expected node data "
                            f"'{missing[0]}' (original ids), got {sorted(tensors)}")
        out.append({key: tensors[key] for key in keys})
    return out
