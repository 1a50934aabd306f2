"""The steps of a streamed dispatch (:mod:`.dispatch`), each a task a worker
process runs on its own: route one edge chunk, sort one part's edges, scan one block for a halo
hop, expand one part's hop, build one part's graph, scatter one node key into part files.

Work-folder files (``.npy``, new ids, int64): ``ids/`` (assignment, new -> original and
original -> new node ids), ``route/c<chunk>_p<part>.npy`` (2 x m: the chunk's edges into the
part), ``edges/p<k>_{s,d}.npy`` (the part's in-edges in new edge-id order),
``xout/q<q>_k<k>.npy`` (3 x m: src, dst, new edge id of part q's edges whose source part k
owns), ``front/h<j>_p<k>.npy`` (hop j's nodes, in order), ``front/mask<j>.npy`` (parts x nodes),
``hop/j<j>_q<q>_b<b>_k<k>.npy`` and ``hopedges/j<j>_p<k>.npy`` (hop j's edges), ``out/part<k>/``
(the finished part files). Every file is written to a temporary name and renamed, so a killed
step leaves nothing that looks finished.
"""
from __future__ import annotations

import glob
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dsgraph.errors import DataError
from dsgraph.partition.streamed import halo as hs
from dsgraph.partition.ndarray_file import TensorSlot, open_slot, write_rows
from dsgraph.procstats import peak_rss_mb

BLOCK_EDGES = 1 << 22  # edges per block of the hop scans: 64 MiB of ids read at once
_GRAPH: Any = None  # the GraphChunks this process reads (set by init_worker or the caller)


@dataclass
class Plan:
    """What every step needs to know, small and picklable."""

    work: str
    num_nodes: int
    num_parts: int
    halo_hops: int
    node_start: list[int]
    edge_start: list[int] = field(default_factory=list)
    slots: dict[int, dict[str, TensorSlot]] = field(default_factory=dict)

    def path(self, rel: str) -> Path:
        """A path in the work folder."""
        return Path(self.work) / rel

    def load(self, rel: str) -> np.ndarray:
        """A work-folder array, mapped (read only)."""
        return np.load(self.path(rel), mmap_mode="r")

    def save(self, rel: str, array: np.ndarray) -> str:
        """Write an array under a temporary name and rename it; return ``rel``."""
        path = self.path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, np.ascontiguousarray(array))
        os.replace(tmp, path)
        return rel


def init_worker(graph_bytes: bytes) -> None:
    """Worker start: one thread per process (set before torch loads), then the graph."""
    global _GRAPH
    os.environ["OMP_NUM_THREADS"] = "1"  # torch and DGL read it when (if ever) they load
    _GRAPH = pickle.loads(graph_bytes)
    if "torch" in sys.modules:  # loaded by the graph's unpickling: the setting came too late
        sys.modules["torch"].set_num_threads(1)


def set_graph(graph: Any) -> None:
    """The graph read by steps run in this process (no workers)."""
    global _GRAPH
    _GRAPH = graph


def _done(files: list[str], **result: Any) -> dict:
    return {**result, "files": files, "peak_rss_mb": peak_rss_mb()}


def route_chunk(plan: Plan, chunk: int, first_eid: int, num: int) -> dict:
    """Send chunk ``chunk``'s edges, in new ids, to the part of their destination."""
    src, dst = _GRAPH.read_edges(chunk)
    if src.shape != (num,) or dst.shape != (num,):
        raise DataError(f"edge chunk {chunk}: expected {num} src and dst ids (edge ids "
                        f"{first_eid}..{first_eid + num}), got {src.shape} and {dst.shape}")
    for name, ids in (("src", src), ("dst", dst)):
        if num and (int(ids.min()) < 0 or int(ids.max()) >= plan.num_nodes):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise DataError(f"edge chunk {chunk}: {name} id {bad} outside 0..{plan.num_nodes - 1}")
    o2n = plan.load("ids/orig2new.npy")
    sn, dn = o2n[src], o2n[dst]
    del src, dst
    ns = np.asarray(plan.node_start)
    p_src, p_dst = hs.part_of(sn, ns), hs.part_of(dn, ns)
    files = []
    for k in range(plan.num_parts):
        sel = p_dst == k
        files.append(plan.save(f"route/c{chunk:06d}_p{k}.npy", np.stack([sn[sel], dn[sel]])))
    cross = p_src != p_dst
    return _done(files, into=np.bincount(p_dst, minlength=plan.num_parts).tolist(),
                 out=np.bincount(p_src[cross], minlength=plan.num_parts).tolist(),
                 cut=int(cross.sum()))


def sort_part(plan: Plan, part: int, chunks: int) -> dict:
    """Part ``part``'s in-edges in new edge-id order; its edges from other parts' nodes, by the
    source's part; hop 1 of its halo (halo_hops >= 2)."""
    lo, hi = plan.node_start[part], plan.node_start[part + 1]
    first = plan.edge_start[part]
    s, d = (np.empty(plan.edge_start[part + 1] - first, dtype=np.int64) for _ in range(2))
    at = 0
    for c in range(chunks):  # read straight into place: one part's edges, held once
        path = plan.path(f"route/c{c:06d}_p{part}.npy")
        m = _npy_len(path)
        _read_into(path, [s[at:at + m], d[at:at + m]])
        at += m
    if plan.halo_hops >= 2:  # DGL numbers them along its in-CSR: by destination
        order = np.argsort(d, kind="stable")
        d = d[order]
        s = s[order]
        del order
    files = [plan.save(f"edges/p{part}_s.npy", s), plan.save(f"edges/p{part}_d.npy", d)]
    for k in range(plan.num_parts):
        if k != part:
            idx = np.flatnonzero((s >= plan.node_start[k]) & (s < plan.node_start[k + 1]))
            files.append(plan.save(f"xout/q{part}_k{k}.npy",
                                   np.stack([s[idx], d[idx], idx + first])))
    if plan.halo_hops >= 2:
        files.append(plan.save(f"front/h1_p{part}.npy",
                               hs.first_occurrences(s[(s < lo) | (s >= hi)])))
    return _done(files)


def hop_scan(plan: Plan, hop: int, part: int, block: int) -> dict:
    """Block ``block`` of part ``part``'s edges: for each part k, those into k's hop ``hop``
    from a node k does not own."""
    lo = block * BLOCK_EDGES
    s = np.array(plan.load(f"edges/p{part}_s.npy")[lo:lo + BLOCK_EDGES])
    d = np.array(plan.load(f"edges/p{part}_d.npy")[lo:lo + BLOCK_EDGES])
    eid = plan.edge_start[part] + lo + np.arange(s.shape[0], dtype=np.int64)
    mask = plan.load(f"front/mask{hop}.npy")
    p_src = hs.part_of(s, np.asarray(plan.node_start))
    files = []
    for k in range(plan.num_parts):
        sel = mask[k][d] & (p_src != k)
        files.append(plan.save(f"hop/j{hop}_q{part:04d}_b{block:06d}_k{k}.npy",
                               np.stack([s[sel], d[sel], eid[sel]])))
    return _done(files)


def hop_expand(plan: Plan, hop: int, part: int) -> dict:
    """Part ``part``'s hop ``hop`` edges (gathered from the scans) and hop ``hop + 1``."""
    names = sorted(glob.glob(str(plan.path(f"hop/j{hop}_q*_b*_k{part}.npy"))))
    edges = np.concatenate([np.load(n) for n in names], axis=1) if names else \
        np.empty((3, 0), dtype=np.int64)
    files = [plan.save(f"hopedges/j{hop}_p{part}.npy", edges)]
    fronts = [np.load(plan.path(f"front/h{j}_p{part}.npy")) for j in range(1, hop + 1)]
    lo, hi = plan.node_start[part], plan.node_start[part + 1]
    seen = hs.seen_mask(plan.num_nodes, lo, hi, fronts)
    nxt = hs.next_front(fronts[-1], edges[0], edges[1], seen)
    files.append(plan.save(f"front/h{hop + 1}_p{part}.npy", nxt))
    return _done(files, size=int(nxt.shape[0]))


def build_part(plan: Plan, part: int) -> dict:
    """Part ``part``'s ``graph.dgl``, as the in-memory writer builds it."""
    import dgl
    import torch

    n, lo, hi = plan.num_nodes, plan.node_start[part], plan.node_start[part + 1]
    e_in = plan.edge_start[part + 1] - plan.edge_start[part]
    pieces = [plan.path(f"hopedges/j{j}_p{part}.npy") for j in range(1, plan.halo_hops)]
    pieces += [plan.path(f"xout/q{q}_k{part}.npy") for q in range(plan.num_parts) if q != part]
    sizes = [_npy_len(p) for p in pieces]
    # One array per field, filled straight from the files: a part's edges are the largest
    # arrays of the whole dispatch, so no concatenated or fancy-indexed copies of them.
    src, dst, eid = (np.empty(e_in + sum(sizes), dtype=np.int64) for _ in range(3))
    _read_into(plan.path(f"edges/p{part}_s.npy"), [src[:e_in]])
    _read_into(plan.path(f"edges/p{part}_d.npy"), [dst[:e_in]])
    eid[:e_in] = np.arange(plan.edge_start[part], plan.edge_start[part + 1], dtype=np.int64)
    at = e_in
    for path, m in zip(pieces, sizes):
        _read_into(path, [src[at:at + m], dst[at:at + m], eid[at:at + m]])
        at += m
    if plan.halo_hops == 1:
        halo = hs.one_hop_halo(n, lo, hi, [src, dst])
    else:
        fronts = [np.load(plan.path(f"front/h{j}_p{part}.npy"))
                  for j in range(1, plan.halo_hops + 1)]
        seen = hs.seen_mask(n, lo, hi, fronts)
        out_at = e_in + sum(sizes[:plan.halo_hops - 1])
        halo = np.concatenate([*fronts, hs.out_neighbours(src[out_at:], dst[out_at:],
                                                           eid[out_at:], seen)])
        del seen
        order = np.argsort(eid[e_in:], kind="stable")  # outer edges by edge id, as DGL
        for arr in (src, dst, eid):
            arr[e_in:] = arr[e_in:][order]
        del order
    nid = np.concatenate([np.arange(lo, hi, dtype=np.int64), halo])
    local = np.empty(n, dtype=np.int64)  # new id -> local id (only this part's nodes are read)
    local[nid] = np.arange(nid.shape[0], dtype=np.int64)
    np.take(local, src, out=src)
    np.take(local, dst, out=dst)
    del local
    sub = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=nid.shape[0])
    inner_node = np.zeros(nid.shape[0], dtype=np.uint8)
    inner_node[: hi - lo] = 1
    inner_edge = np.zeros(eid.shape[0], dtype=np.uint8)
    inner_edge[:e_in] = 1
    sub.ndata[dgl.NID] = torch.from_numpy(nid)
    sub.ndata["inner_node"] = torch.from_numpy(inner_node)
    sub.ndata["part_id"] = torch.from_numpy(hs.part_of(nid, np.asarray(plan.node_start)))
    sub.edata[dgl.EID] = torch.from_numpy(eid)
    sub.edata["inner_edge"] = torch.from_numpy(inner_edge)
    rel = f"out/part{part}/graph.dgl"
    path = plan.path(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".graph.{os.getpid()}.tmp.dgl")
    dgl.save_graphs(str(tmp), [sub])
    os.replace(tmp, path)
    return _done([rel], nodes=hi - lo, inner_edges=int(e_in), halo_nodes=int(halo.shape[0]))


def _npy_len(path: Path) -> int:
    """The last dimension of a work-folder array, from its header."""
    with open(path, "rb") as fh:
        return int(_npy_header(fh)[-1])


def _npy_header(fh) -> tuple[int, ...]:
    major, _ = np.lib.format.read_magic(fh)
    read = (np.lib.format.read_array_header_1_0 if major == 1 else
            np.lib.format.read_array_header_2_0)
    return read(fh)[0]


def _read_into(path: Path, targets: list[np.ndarray]) -> None:
    """A work-folder int64 array's rows read straight into ``targets`` (contiguous, int64)."""
    with open(path, "rb") as fh:
        _npy_header(fh)
        for target in targets:
            view = memoryview(target).cast("B")
            if fh.readinto(view) != view.nbytes:
                raise DataError(f"{path}: work file shorter than its header says; remove the "
                                f"work folder and rerun")


def scatter_key(plan: Plan, key: str, dtype: str, row_shape: tuple[int, ...],
                parts: list[int]) -> dict:
    """Every row of node key ``key`` owned by ``parts`` into their ``node_feat.dgl``, at its
    reshuffled row; returns the largest value (``label``) or per-part sums (``train_mask``)."""
    assign = plan.load("ids/assign.npy")
    o2n = plan.load("ids/orig2new.npy")
    want, expected = np.dtype(dtype), 0
    largest, sums = None, {k: 0 for k in parts}
    for start, rows in _GRAPH.iter_node_data(key):
        m = rows.shape[0]
        if start != expected or rows.dtype != want or tuple(rows.shape[1:]) != row_shape \
                or start + m > plan.num_nodes:
            raise DataError(f"node data '{key}': block at node {start}: expected rows from node "
                            f"{expected} of dtype {want} and row shape {row_shape} within "
                            f"{plan.num_nodes} nodes, got {m} rows from {start} of {rows.dtype}, "
                            f"{tuple(rows.shape[1:])}")
        owner = np.asarray(assign[start:start + m])
        new = np.asarray(o2n[start:start + m])
        for k in parts:
            sel = owner == k
            if not sel.any():
                continue
            picked = rows[sel]
            pos = new[sel] - plan.node_start[k]
            _put_rows(plan.path(f"out/part{k}/node_feat.dgl"), plan.slots[k][f"_N/{key}"], pos,
                      picked)
            if key == "label" and want.kind in "iub":
                top = int(picked.max())
                largest = top if largest is None else max(largest, top)
            elif key == "train_mask":
                sums[k] += int(picked.astype(np.int64).sum())
        expected = start + m
    if expected != plan.num_nodes:
        raise DataError(f"node data '{key}': expected rows for {plan.num_nodes} nodes, got "
                        f"{expected}")
    return _done([], largest=largest, sums={str(k): v for k, v in sums.items()})


def _put_rows(path: Path, slot: TensorSlot, pos: np.ndarray, rows: np.ndarray) -> None:
    """Rows at positions ``pos`` of a tensor: one write for a run of consecutive positions (the
    usual case: new ids keep the original order within a part), else a scatter through a
    mapping that is dropped at once, so resident memory stays one block's."""
    if int(pos[-1]) - int(pos[0]) + 1 == pos.shape[0] and (pos.shape[0] < 2 or
                                                          bool((np.diff(pos) == 1).all())):
        write_rows(path, slot, int(pos[0]), rows)
        return
    view = open_slot(path, slot)
    view[pos] = rows
    view.flush()
    del view


def write_orig_ids(plan: Plan, part: int) -> dict:
    """``_N/orig_id`` of part ``part``: the original id of each owned node."""
    new2orig = plan.load("ids/new2orig.npy")
    lo, hi = plan.node_start[part], plan.node_start[part + 1]
    slot = plan.slots[part]["_N/orig_id"]
    path = plan.path(f"out/part{part}/node_feat.dgl")
    for at in range(lo, hi, 1 << 22):
        write_rows(path, slot, at - lo, np.asarray(new2orig[at:min(hi, at + (1 << 22))]))
    return _done([])


def fingerprint(plan: Plan) -> dict:
    """The source graph's fingerprint (:func:`dsgraph.partition.integrity.
    graph_fingerprint_chunks`)."""
    from dsgraph.partition.integrity import graph_fingerprint_chunks
    return _done([], digest=graph_fingerprint_chunks(_GRAPH))
