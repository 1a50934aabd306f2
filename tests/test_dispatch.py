"""Streamed dispatch: the same partition files as the in-memory writer, resumable, parallel."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch
from dgl.data.utils import load_tensors

from dsgraph.config import DatasetConfig, load
from dsgraph.data.chunked.contract import InMemoryChunks
from dsgraph.data.synthetic import generate
from dsgraph.errors import DataError, UserError
from dsgraph.partition.streamed.dispatch import FAIL_AFTER, dispatch_partitions
from dsgraph.partition.format import write_partitions
from dsgraph.partition.integrity import (
    graph_fingerprint,
    graph_fingerprint_chunks,
    verify_partitions,
)
from dsgraph.partition.meta import BLOCK

CHUNK = 700  # rows per chunk: several edge chunks and node blocks, none aligned to a part


class BrokenChunks(InMemoryChunks):
    """A graph whose second edge chunk cannot be read (a corrupt file, say)."""

    def read_edges(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        if chunk == 1:
            raise DataError("edges/chunk-1.npy: expected 700 int64 ids, got 12 bytes")
        return super().read_edges(chunk)


@pytest.fixture(scope="module")
def graph():
    return generate(DatasetConfig(num_nodes=2000, feat_dim=8))


def assignment(g, num_parts: int) -> np.ndarray:
    return np.random.default_rng(num_parts).integers(0, num_parts, g.num_nodes())


@pytest.fixture(scope="module")
def reference(graph, tmp_path_factory):
    """(halo_hops, num_parts) -> the in-memory writer's JSON, each written once."""
    done: dict[tuple[int, int], Path] = {}

    def get(hops: int, parts: int, g=None) -> Path:
        if (hops, parts) not in done or g is not None:
            out = tmp_path_factory.mktemp(f"mem{hops}{parts}") / "parts"
            done[hops, parts] = write_partitions(g or graph, assignment(g or graph, parts), out,
                                                 "g", halo_hops=hops)
        return done[hops, parts]

    return get


def read_graph(path: Path) -> dgl.DGLGraph:
    return dgl.load_graphs(str(path))[0][0]


def assert_same_partitions(mem_json: Path, str_json: Path) -> None:
    """Everything the two writers produce is equal, but the times, peak RSS and graph.dgl's
    bytes (dgl.save_graphs writes uninitialized header bytes: two saves of one graph differ)."""
    m1, m2 = json.loads(mem_json.read_text()), json.loads(str_json.read_text())
    assert list(m1) == list(m2)
    assert {k: v for k, v in m1.items() if k != BLOCK} == \
        {k: v for k, v in m2.items() if k != BLOCK}
    b1, b2 = m1[BLOCK], m2[BLOCK]
    assert {k: v for k, v in b1.items() if k != "files"} == \
        {k: v for k, v in b2.items() if k != "files"}
    assert b1["files"].keys() == b2["files"].keys()
    for rel, rec in b1["files"].items():
        assert rec["size"] == b2["files"][rel]["size"], rel
        if not rel.endswith("graph.dgl"):
            assert rec["sha256"] == b2["files"][rel]["sha256"], rel
    for k in range(m1["num_parts"]):
        for name in ("node_feat.dgl", "edge_feat.dgl"):
            assert (mem_json.parent / f"part{k}" / name).read_bytes() == \
                (str_json.parent / f"part{k}" / name).read_bytes()
        f1 = load_tensors(str(mem_json.parent / f"part{k}" / "node_feat.dgl"))
        f2 = load_tensors(str(str_json.parent / f"part{k}" / "node_feat.dgl"))
        assert f1.keys() == f2.keys() and "_N/orig_id" in f2
        for key in f1:
            assert f1[key].dtype == f2[key].dtype and torch.equal(f1[key], f2[key]), key
        g1 = read_graph(mem_json.parent / f"part{k}" / "graph.dgl")
        g2 = read_graph(str_json.parent / f"part{k}" / "graph.dgl")
        assert (g1.num_nodes(), g1.num_edges()) == (g2.num_nodes(), g2.num_edges())
        for a, b in zip(g1.edges(), g2.edges()):
            assert torch.equal(a, b)
        for d1, d2 in ((g1.ndata, g2.ndata), (g1.edata, g2.edata)):
            assert list(d1.keys()) == list(d2.keys())
            for key in d1.keys():
                assert d1[key].dtype == d2[key].dtype and torch.equal(d1[key], d2[key]), key
    s1 = json.loads((mem_json.parent / "partition_stats.json").read_text())
    s2 = json.loads((str_json.parent / "partition_stats.json").read_text())
    assert list(s1) == list(s2)
    assert {k: v for k, v in s1.items() if k not in ("wall_s", "peak_rss_mb")} == \
        {k: v for k, v in s2.items() if k not in ("wall_s", "peak_rss_mb")}


def check_readable(part_json: Path, num_parts: int) -> None:
    """Stock DGL loads every part; dsgraph's verification accepts the files."""
    verify_partitions(part_json, load(None, [f"partition.num_parts={num_parts}"]))
    for k in range(num_parts):
        sub, nfeat = dgl.distributed.load_partition(str(part_json), k)[:2]
        assert int(sub.ndata["inner_node"].sum()) == nfeat["_N/feat"].shape[0]


@pytest.mark.parametrize("hops, parts, workers", [(1, 2, 1), (2, 2, 1), (2, 3, 2)])
def test_same_files_as_in_memory_writer(graph, reference, tmp_path, hops, parts, workers):
    out = dispatch_partitions(InMemoryChunks(graph, CHUNK), assignment(graph, parts),
                              tmp_path / "parts", "g", halo_hops=hops, workers=workers,
                              work_dir=tmp_path / "work")
    assert_same_partitions(reference(hops, parts), out)
    check_readable(out, parts)
    assert not (tmp_path / "work").exists()


def test_three_hops_on_a_directed_multigraph_match_dgl(reference, tmp_path):
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 300, 1200), rng.integers(0, 300, 1200)
    src, dst = np.concatenate([src, src[:40]]), np.concatenate([dst, dst[:40]])  # repeated edges
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=300)
    g.ndata["feat"] = torch.from_numpy(rng.standard_normal((300, 3)).astype(np.float32))
    g.ndata["label"] = torch.from_numpy(rng.random((300, 2)).astype(np.float32))
    mem = reference(3, 3, g)
    out = dispatch_partitions(InMemoryChunks(g, 97), assignment(g, 3), tmp_path / "parts", "g",
                              halo_hops=3, work_dir=tmp_path / "work")
    assert_same_partitions(mem, out)
    assert json.loads(out.read_text())["num_targets"] == 2


def test_fingerprint_of_chunks_equals_in_memory(graph):
    assert graph_fingerprint_chunks(InMemoryChunks(graph, CHUNK)) == graph_fingerprint(graph)
    g = graph.clone()
    g.ndata["feat"] = graph.ndata["feat"].clone()  # clone() shares the feature tensors
    g.ndata["feat"][5, 3] += 1.0
    assert graph_fingerprint_chunks(InMemoryChunks(g, 333)) == graph_fingerprint(g) != \
        graph_fingerprint(graph)


def test_rerun_reuses_finished_steps(graph, reference, tmp_path, monkeypatch, capsys):
    work, out, a = tmp_path / "work", tmp_path / "parts", assignment(graph, 2)
    monkeypatch.setenv(FAIL_AFTER, "sort")
    with pytest.raises(RuntimeError, match="stopped after step sort"):
        dispatch_partitions(InMemoryChunks(graph, CHUNK), a, out, "g", work_dir=work)
    chunks = -(-graph.num_edges() // CHUNK)
    assert not out.exists() and len(list((work / "done").glob("route-c*.json"))) == chunks
    monkeypatch.delenv(FAIL_AFTER)
    capsys.readouterr()
    part_json = dispatch_partitions(InMemoryChunks(graph, CHUNK), a, out, "g", work_dir=work)
    said = capsys.readouterr().out
    assert f"route: reusing {chunks} of {chunks}" in said and "sort: reusing 2 of 2" in said
    assert "graphs: reusing" not in said
    assert_same_partitions(reference(1, 2), part_json)


def test_work_of_other_inputs_is_cleared(graph, tmp_path, monkeypatch, capsys):
    work, out = tmp_path / "work", tmp_path / "parts"
    monkeypatch.setenv(FAIL_AFTER, "route")
    with pytest.raises(RuntimeError):
        dispatch_partitions(InMemoryChunks(graph, CHUNK), assignment(graph, 2), out,
                            work_dir=work)
    monkeypatch.delenv(FAIL_AFTER)
    other = assignment(graph, 2)
    other[0] = 1 - other[0]
    capsys.readouterr()
    dispatch_partitions(InMemoryChunks(graph, CHUNK), other, out, work_dir=work)
    said = capsys.readouterr().out
    assert "clearing it" in said and "reusing" not in said
    assert np.array_equal(load_tensors(str(out / "part1" / "node_feat.dgl"))["_N/orig_id"],
                          np.flatnonzero(other == 1))


@pytest.mark.timeout(90)
def test_failing_worker_ends_the_dispatch_with_its_error(graph, tmp_path):
    with pytest.raises(DataError) as err:
        dispatch_partitions(BrokenChunks(graph, CHUNK), assignment(graph, 2), tmp_path / "p",
                            workers=2, work_dir=tmp_path / "work")
    assert str(err.value) == "edges/chunk-1.npy: expected 700 int64 ids, got 12 bytes"
    assert err.value.__cause__ is None and not (tmp_path / "p").exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "work"]


def test_bad_input_is_one_line_and_writes_nothing(graph, tmp_path):
    a = assignment(graph, 2)
    with pytest.raises(DataError, match=r"assignment: expected 2000 integer part ids"):
        dispatch_partitions(InMemoryChunks(graph, CHUNK), a[:-1], tmp_path / "p",
                            work_dir=tmp_path / "w")
    with pytest.raises(UserError, match="part 1 would be empty"):
        dispatch_partitions(InMemoryChunks(graph, CHUNK), np.where(a == 1, 2, a),
                            tmp_path / "p", work_dir=tmp_path / "w")
    g = dgl.graph((torch.tensor([0, 1]), torch.tensor([1, 2])), num_nodes=3)
    g.ndata["feat"] = torch.zeros(3, 2)
    bad = InMemoryChunks(g, 1)
    bad.num_nodes = 2  # the chunks name node 2 of a 2-node graph
    with pytest.raises(DataError, match=r"edge chunk 1: dst id 2 outside 0..1"):
        dispatch_partitions(bad, np.array([0, 1]), tmp_path / "p", work_dir=tmp_path / "w2")
    assert not (tmp_path / "p").exists()
    shutil.rmtree(tmp_path / "w2")
