"""Heterogeneous partition files: stock DGL reads them, every node, feature and edge round-trips,
halos, the format matches DGL's own partition_graph, integrity, refusals."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch

from dsgraph.config import from_dict
from dsgraph.errors import DataError, UserError
from dsgraph.partition import (
    homogeneous_projection,
    load_local_partition,
    orig_ids,
    orig_ids_per_type,
    partition_hetero_graph,
    read_meta,
    verify_partitions,
    write_hetero_partitions,
)
from dsgraph.partition.integrity import graph_fingerprint
from dsgraph.partition.meta import key_digest

SIZES = {"paper": 120, "author": 80, "field": 15}
RELATIONS = [("author", "writes", "paper", 220), ("paper", "cites", "paper", 300),
             ("paper", "has_topic", "field", 150), ("author", "in_field", "field", 90)]
TARGET_KEYS = ("feat", "label", "train_mask", "val_mask", "test_mask")


def make_graph(seed: int = 0) -> dgl.DGLGraph:
    """3 node types, 4 relations and their reverses; feat on paper and author, labels and masks
    on paper (the target), nothing on field; an edge weight on one relation."""
    rng = np.random.default_rng(seed)
    data = {}
    for s, rel, d, m in RELATIONS:
        u = torch.from_numpy(rng.integers(0, SIZES[s], m))
        v = torch.from_numpy(rng.integers(0, SIZES[d], m))
        data[(s, rel, d)] = (u, v)
        data[(d, f"rev_{rel}", s)] = (v, u)
    g = dgl.heterograph(data, num_nodes_dict=SIZES)
    for nt, dim in (("paper", 6), ("author", 4)):
        g.nodes[nt].data["feat"] = torch.from_numpy(
            rng.standard_normal((SIZES[nt], dim)).astype(np.float32))
    p = SIZES["paper"]
    g.nodes["paper"].data["label"] = torch.from_numpy(rng.integers(0, 5, p))
    split = torch.from_numpy(rng.integers(0, 3, p))
    for i, key in enumerate(("train_mask", "val_mask", "test_mask")):
        g.nodes["paper"].data[key] = split == i
    g.edges["cites"].data["w"] = torch.from_numpy(rng.random(RELATIONS[1][3]).astype(np.float32))
    return g


@pytest.fixture(scope="module")
def graph():
    return make_graph()


@pytest.fixture(scope="module")
def written(graph, tmp_path_factory):
    """num_parts -> partition JSON (METIS for 2 parts, random otherwise), each written once."""
    done: dict[int, Path] = {}

    def get(num_parts: int) -> Path:
        if num_parts not in done:
            out = tmp_path_factory.mktemp(f"hetero{num_parts}") / "parts"
            method = "metis" if num_parts == 2 else "random"
            done[num_parts] = partition_hetero_graph(graph, num_parts, out, method=method)
        return done[num_parts]

    return get


def load_parts(part_json: Path) -> list[tuple]:
    """Every part through stock DGL: (graph, node feats, edge feats, partition book)."""
    n = json.loads(part_json.read_text())["num_parts"]
    out = []
    for k in range(n):
        sub, nfeat, efeat, gpb, _, ntypes, etypes = dgl.distributed.load_partition(
            str(part_json), k)
        assert gpb.partid == k and gpb.num_partitions() == n
        out.append((sub, nfeat, efeat, gpb, ntypes, etypes))
    return out


def test_assignment_order_is_to_homogeneous(graph):
    src, dst, ntype, etype = homogeneous_projection(graph)
    homo = dgl.to_homogeneous(graph)
    s, d = homo.edges()
    assert np.array_equal(src, s.numpy()) and np.array_equal(dst, d.numpy())
    assert np.array_equal(ntype, homo.ndata[dgl.NTYPE].numpy())
    assert np.array_equal(etype, homo.edata[dgl.ETYPE].numpy())


@pytest.mark.parametrize("num_parts", [1, 2, 3])
def test_round_trip_through_stock_dgl(graph, written, num_parts):
    part_json = written(num_parts)
    parts = load_parts(part_json)
    meta = read_meta(part_json)
    assert meta["target_ntype"] == "paper" and meta["num_classes"] == 5
    per_type = orig_ids_per_type(part_json)
    homo_orig = orig_ids(part_json).numpy()
    offsets = dict(zip(graph.ntypes, np.cumsum([0] + [graph.num_nodes(t) for t in graph.ntypes])))
    seen_edges = {e: [] for e in graph.canonical_etypes}
    owner = {nt: np.full(graph.num_nodes(nt), -1) for nt in graph.ntypes}
    for k, (sub, nfeat, efeat, gpb, ntypes, etypes) in enumerate(parts):
        assert ntypes == graph.ntypes and etypes == graph.canonical_etypes
        inner = sub.ndata["inner_node"].bool()
        gid = sub.ndata[dgl.NID]
        tid, per_type_id = gpb.map_to_per_ntype(gid)
        assert torch.equal(tid.to(torch.int32), sub.ndata[dgl.NTYPE])
        for t, nt in enumerate(graph.ntypes):
            mine = inner & (sub.ndata[dgl.NTYPE] == t)
            lo, hi = meta["node_map"][nt][k]
            assert torch.equal(gid[mine], torch.arange(lo, hi))  # one contiguous range
            orig = nfeat[f"{nt}/orig_id"]
            assert orig.dtype == torch.int64 and orig.shape == (hi - lo,)
            # the partition book's per-type ids index orig_ids_per_type
            assert torch.equal(per_type[nt][per_type_id[mine]], orig)
            assert np.array_equal(homo_orig[gid[mine].numpy()], orig.numpy() + offsets[nt])
            owner[nt][orig.numpy()] = k
            for key in graph.nodes[nt].data.keys():
                value = graph.nodes[nt].data[key]
                stored = nfeat[f"{nt}/{key}"]
                assert torch.equal(stored.to(value.dtype), value[orig]), (nt, key)
            expected = {"paper": TARGET_KEYS, "author": ("feat",), "field": ()}[nt]
            assert sorted(key.split("/")[1] for key in nfeat if key.startswith(f"{nt}/")) == \
                sorted((*expected, "orig_id"))
        # inner edges: map back through the partition book to relation and original endpoints
        inner_e = sub.edata["inner_edge"].bool()
        ls, ld = (x[inner_e] for x in sub.edges())
        assert bool(inner[ld].all()), "an inner edge whose destination is not owned"
        e_tid, e_per_type = gpb.map_to_per_etype(sub.edata[dgl.EID][inner_e])
        assert torch.equal(e_tid.to(torch.int32), sub.edata[dgl.ETYPE][inner_e])
        s_tid, s_pt = gpb.map_to_per_ntype(gid[ls])
        d_tid, d_pt = gpb.map_to_per_ntype(gid[ld])
        for e, (s, rel, d) in enumerate(graph.canonical_etypes):
            sel = e_tid == e
            assert bool((s_tid[sel] == graph.get_ntype_id(s)).all())
            assert bool((d_tid[sel] == graph.get_ntype_id(d)).all())
            lo, hi = meta["edge_map"][f"{s}:{rel}:{d}"][k]
            first = sum(b - a for a, b in meta["edge_map"][f"{s}:{rel}:{d}"][:k])
            # in edge id order: row i of edge_feat.dgl is the i-th of these
            assert torch.equal(e_per_type[sel], torch.arange(first, first + hi - lo))
            pairs = [per_type[s][s_pt[sel]].numpy(), per_type[d][d_pt[sel]].numpy()]
            if rel == "cites":  # the one relation with edge data
                pairs.append(efeat["paper:cites:paper/w"].numpy())
            seen_edges[(s, rel, d)].append(np.stack(pairs, 1))
    for nt in graph.ntypes:
        assert (owner[nt] >= 0).all(), f"a {nt} node owned by no part"
    for (s, rel, d), pieces in seen_edges.items():
        got = np.concatenate(pieces)
        u, v = (x.numpy() for x in graph.edges(etype=(s, rel, d)))
        n = graph.num_nodes(d)
        # every original edge exactly once (as a multiset: random graphs repeat pairs), with
        # its edge data
        key = got[:, 0].astype(np.int64) * n + got[:, 1].astype(np.int64)
        assert np.array_equal(np.sort(key), np.sort(u * n + v)), rel
        if rel == "cites":
            w = graph.edges[(s, rel, d)].data["w"].numpy()
            mine, orig = np.lexsort((got[:, 2], key)), np.lexsort((w, u * n + v))
            assert np.array_equal(got[mine, 2].astype(np.float32), w[orig])


@pytest.mark.parametrize("num_parts", [2, 3])
def test_halo_is_the_one_hop_neighbourhood_owned_elsewhere(graph, written, num_parts):
    part_json = written(num_parts)
    src, dst, _, _ = homogeneous_projection(graph)
    homo_orig = orig_ids(part_json).numpy()
    owner = np.empty(graph.num_nodes(), np.int64)
    for k, (sub, *_rest) in enumerate(load_parts(part_json)):
        inner = sub.ndata["inner_node"].bool().numpy()
        owner[homo_orig[sub.ndata[dgl.NID].numpy()[inner]]] = k
    for k, (sub, *_rest) in enumerate(load_parts(part_json)):
        inner = sub.ndata["inner_node"].bool().numpy()
        halo = homo_orig[sub.ndata[dgl.NID].numpy()[~inner]]
        in_nbrs = np.unique(src[(owner[dst] == k) & (owner[src] != k)])
        out_nbrs = np.unique(dst[(owner[src] == k) & (owner[dst] != k)])
        # every relation has its reverse, so in- and out-neighbours coincide
        assert np.array_equal(np.sort(halo), in_nbrs)
        assert np.array_equal(in_nbrs, np.union1d(in_nbrs, out_nbrs))
        assert np.array_equal(sub.ndata["part_id"].numpy()[~inner], owner[halo])
    stats = json.loads((part_json.parent / "partition_stats.json").read_text())
    assert [p["nodes"] for p in stats["parts"]] == [int((owner == k).sum())
                                                    for k in range(num_parts)]
    assert sum(p["inner_edges"] for p in stats["parts"]) == graph.num_edges()
    train = graph.nodes["paper"].data["train_mask"]
    assert sum(p["train_nodes"] for p in stats["parts"]) == int(train.sum())
    assert all(sum(p["nodes_per_type"].values()) == p["nodes"] for p in stats["parts"])


@pytest.mark.parametrize("halo_hops", [1, 2])
def test_a_part_without_nodes_of_a_type_and_deeper_halos(graph, tmp_path, halo_hops):
    """Every field node in part 0: part 1's field range is empty, and stock DGL still maps
    every id (DGL's own partition_graph cannot write such a part); 2-hop halos go through
    DGL's own splitter."""
    assign = np.arange(graph.num_nodes()) % 2
    node_type = homogeneous_projection(graph)[2]
    assign[node_type == graph.get_ntype_id("field")] = 0
    path = write_hetero_partitions(graph, assign, tmp_path / "out", "g", halo_hops=halo_hops)
    meta = read_meta(path)
    lo, hi = meta["node_map"]["field"][1]
    assert lo == hi
    per_type = orig_ids_per_type(path)
    for k, (sub, nfeat, _, gpb, *_rest) in enumerate(load_parts(path)):
        assert nfeat["field/orig_id"].shape == ((15,) if k == 0 else (0,))
        tid, pid = gpb.map_to_per_ntype(sub.ndata[dgl.NID])
        assert torch.equal(tid.to(torch.int32), sub.ndata[dgl.NTYPE])
        inner = sub.ndata["inner_node"].bool()
        for t, nt in enumerate(graph.ntypes):
            mine = inner & (tid == t)
            lo, hi = meta["node_map"][nt][k]
            assert torch.equal(sub.ndata[dgl.NID][mine], torch.arange(lo, hi))  # row order
            assert bool((gpb.nid2partid(pid[mine], nt) == k).all())
            for key in graph.nodes[nt].data.keys():
                value = graph.nodes[nt].data[key]
                assert torch.equal(nfeat[f"{nt}/{key}"].to(value.dtype),
                                   value[per_type[nt][pid[mine]]])
    assert meta["halo_hops"] == halo_hops


def test_format_matches_dgls_own_partition_graph(graph, written, tmp_path):
    ours_json = written(2)
    dgl.random.seed(0)
    dgl.distributed.partition_graph(graph, "graph", 2, str(tmp_path / "dgl"), part_method="random")
    theirs_json = tmp_path / "dgl" / "graph.json"
    ours, theirs = json.loads(ours_json.read_text()), json.loads(theirs_json.read_text())
    assert set(ours) == set(theirs) | {"num_classes", "target_ntype", "dsgraph"}
    for key in ("graph_name", "num_nodes", "num_edges", "num_parts", "halo_hops", "ntypes",
                "etypes", "part-0", "part-1"):
        assert ours[key] == theirs[key], key
    for key in ("node_map", "edge_map"):
        assert list(ours[key]) == list(theirs[key]), key  # same types, same order
        for t in ours[key]:  # the same number of ids of each type (the split differs)
            assert sum(hi - lo for lo, hi in ours[key][t]) == \
                sum(hi - lo for lo, hi in theirs[key][t])
    for (a, na, ea, *_), (b, nb, eb, *_) in zip(load_parts(ours_json), load_parts(theirs_json)):
        for mine, stock in ((a.ndata, b.ndata), (a.edata, b.edata)):
            assert {k: mine[k].dtype for k in mine.keys()} == \
                {k: stock[k].dtype for k in stock.keys()}
        assert set(na) == set(nb) | {f"{nt}/orig_id" for nt in graph.ntypes}
        assert set(ea) == set(eb)
        for mine, stock in ((na, nb), (ea, eb)):
            for key in stock:
                assert mine[key].dtype == stock[key].dtype and \
                    mine[key].shape[1:] == stock[key].shape[1:], key


def test_integrity_verified_and_a_modified_file_detected(written, tmp_path):
    src = written(2)
    cfg = from_dict({"partition": {"num_parts": 2, "out_dir": str(src.parent)}}, "c.yaml")
    verify_partitions(src, cfg)  # passes as written
    shutil.copytree(src.parent, tmp_path / "parts")
    path = tmp_path / "parts" / src.name
    f = tmp_path / "parts" / "part1" / "node_feat.dgl"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(DataError) as exc:
        verify_partitions(path, cfg)
    assert "\n" not in str(exc.value) and str(f) in str(exc.value) and "sha256" in str(exc.value)
    # a type range that no longer follows the one before it, even with a matching digest
    meta = json.loads(path.read_text())
    meta["node_map"]["paper"][1][0] += 1
    meta["dsgraph"]["meta"]["node_map"] = key_digest(meta["node_map"])
    path.write_text(json.dumps(meta))
    with pytest.raises(DataError) as exc:
        read_meta(path)
    assert f"node_map: expected contiguous ranges covering 0..num_nodes={meta['num_nodes']}" \
        in str(exc.value)
    # the full-graph (homogeneous) reader refuses a heterogeneous partitioning in one line
    with pytest.raises(DataError) as exc:
        load_local_partition(src, 0, 2)
    assert "\n" not in str(exc.value) and "ntypes: expected one node type" in str(exc.value)


def test_fingerprint_covers_the_heterograph(graph, written):
    fp = read_meta(written(2))["dsgraph"]["graph_fingerprint"]
    assert graph_fingerprint(graph) == fp
    other = make_graph()
    other.nodes["author"].data["feat"][3, 1] += 1.0
    assert graph_fingerprint(other) != fp
    # a homogeneous graph's fingerprint is the one earlier partitions recorded
    homo = dgl.graph(([0, 1, 2], [1, 2, 0]))
    homo.ndata["feat"] = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    h = hashlib.sha256(b"nodes=3;edges=3")
    for t in homo.edges():
        h.update(t.numpy().astype(np.int64))
    h.update(b";feat:torch.float32:(3, 2);")
    h.update(homo.ndata["feat"].numpy().view(np.uint8))
    assert graph_fingerprint(homo) == h.hexdigest()


def test_empty_part_is_a_one_line_user_error(graph, tmp_path):
    assign = np.zeros(graph.num_nodes(), dtype=np.int64)
    assign[:5] = 2  # part 1 gets nothing
    with pytest.raises(UserError) as err:
        write_hetero_partitions(graph, assign, tmp_path / "out", "g")
    assert str(err.value) == (f"partition: part 1 would be empty ({graph.num_nodes()} nodes "
                              f"into 3 parts); use fewer parts")
    with pytest.raises(UserError) as err:
        write_hetero_partitions(graph, assign[:-1], tmp_path / "out", "g")
    assert "\n" not in str(err.value) and "one part per node" in str(err.value)
    assert list(tmp_path.iterdir()) == []
