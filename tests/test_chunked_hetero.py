"""Typed chunked folders (DGL's chunked format with several node / edge types): round trips of
the generated heterograph through every edge and node-data format, detection, masks or a drawn
split, routing (load_graph, partition's pipeline) and the one-line DataError of every malformed
folder, naming the metadata key or the file."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import dgl
import numpy as np
import pytest
import torch

from dsgraph.config import DatasetConfig
from dsgraph.data.chunked.folder import open_chunked
from dsgraph.data.hetero.chunked import is_hetero_chunked, load_chunked_hetero, write_hetero_chunked
from dsgraph.data.chunked.contract import InMemoryChunks
from dsgraph.data.chunked.write import write_graph_chunks
from dsgraph.data.graphs import load_graph
from dsgraph.data.hetero.contract import add_reverse_relations, generate_hetero
from dsgraph.data.split import MASKS, random_split
from dsgraph.errors import ConfigError, UserError
from tests.test_chunked_format import _edit, _one_line_error, toy_graph

UNLABELLED = [3, 17, 40]  # papers with label -1


def hetero(num_nodes: int = 200) -> dgl.DGLGraph:
    """The generated graph without reverse relations, a few papers unlabelled (-1)."""
    g = generate_hetero(DatasetConfig(name="synthetic_hetero", num_nodes=num_nodes,
                                      num_classes=4, feat_dim=5, avg_degree=6,
                                      add_reverse_edges=False))
    papers = g.nodes["paper"].data
    papers["label"][UNLABELLED] = -1
    for key in MASKS:
        papers[key][UNLABELLED] = False
    return g


def assert_same(h: dgl.DGLGraph, g: dgl.DGLGraph) -> None:
    """Same types, same edges per canonical type in edge-id order, node data bit-equal."""
    assert sorted(h.ntypes) == sorted(g.ntypes)
    assert sorted(h.canonical_etypes) == sorted(g.canonical_etypes)
    for t in g.ntypes:
        assert h.num_nodes(t) == g.num_nodes(t)
        assert sorted(h.nodes[t].data) == sorted(g.nodes[t].data), t
        for k, v in g.nodes[t].data.items():
            assert h.nodes[t].data[k].dtype == v.dtype, (t, k)
            assert torch.equal(h.nodes[t].data[k], v), (t, k)
    for c in g.canonical_etypes:
        for a, b in zip(h.edges(etype=c, order="eid"), g.edges(etype=c, order="eid")):
            assert torch.equal(a, b), c


@pytest.fixture(scope="module")
def graph() -> dgl.DGLGraph:
    return hetero()


@pytest.fixture
def folder(tmp_path, graph) -> Path:
    return write_hetero_chunked(graph, tmp_path / "mag", 2).parent


@pytest.mark.parametrize("edge_format, node_format", [("numpy", "numpy"),
                                                      ("parquet", "parquet"), ("csv", "numpy")])
def test_round_trip(tmp_path, graph, edge_format, node_format):
    meta = write_hetero_chunked(graph, tmp_path / "g", 3, edge_format=edge_format,
                                node_format=node_format)
    doc = json.loads(meta.read_text())
    assert doc["node_type"] == list(graph.ntypes)
    assert [sum(c) for c in doc["num_nodes_per_chunk"]] == [graph.num_nodes(t)
                                                            for t in graph.ntypes]
    assert all(len(c) == 3 for c in doc["num_edges_per_chunk"])
    assert_same(load_chunked_hetero(tmp_path / "g", add_reverse_edges=False), graph)
    # "auto" (as True) adds the reverse relations, as the other heterogeneous readers do
    assert_same(load_chunked_hetero(meta), add_reverse_relations(graph))


def test_detection(tmp_path, folder):
    assert is_hetero_chunked(folder) and is_hetero_chunked(folder / "metadata.json")
    write_graph_chunks(InMemoryChunks(toy_graph()), tmp_path / "one")
    assert not is_hetero_chunked(tmp_path / "one")
    assert not is_hetero_chunked(tmp_path / "nowhere") and not is_hetero_chunked(None)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metadata.json").write_text("{not json")
    assert not is_hetero_chunked(tmp_path / "bad")  # the reader names the problem
    _edit(tmp_path / "one", lambda m: m.update(edge_type=["_N:_E:other"]))
    assert is_hetero_chunked(tmp_path / "one")  # an edge type between two types


def test_streamed_reader_refuses_a_typed_folder(folder):
    _one_line_error(lambda: open_chunked(folder), "node_type", "author", "in_memory")


def test_masks_or_split(folder, graph):
    meta = json.loads((folder / "metadata.json").read_text())
    _edit(folder, lambda m: [m["node_data"]["paper"].pop(k) for k in MASKS])
    _one_line_error(lambda: load_chunked_hetero(folder), "node_data.paper", "dataset.split")
    g = load_chunked_hetero(folder, split=[0.5, 0.2, 0.2], seed=4)
    labelled = graph.nodes["paper"].data["label"].numpy() != -1
    want = random_split(graph.num_nodes("paper"), [0.5, 0.2, 0.2], 4, labelled)
    for k in MASKS:
        assert np.array_equal(g.nodes["paper"].data[k].numpy(), want[k]), k
    meta["node_data"]["paper"].pop("test_mask")
    (folder / "metadata.json").write_text(json.dumps(meta))
    _one_line_error(lambda: load_chunked_hetero(folder), "node_data.paper.test_mask", "missing")


def _bad_ids(folder: Path) -> None:
    np.save(folder / "edges/writes-1.npy", np.array([[0, 10 ** 6]] * 1, np.int64))
    _edit(folder, lambda m: m["num_edges_per_chunk"][m["edge_type"].index(
        "author:writes:paper")].__setitem__(1, 1))


def _second_label(folder: Path) -> None:
    rows = json.loads((folder / "metadata.json").read_text())["num_nodes_per_chunk"][0]
    for i, n in enumerate(rows):
        np.save(folder / f"author/node_data/label-{i}.npy", np.zeros(n, np.int64))
    _edit(folder, lambda m: m["node_data"]["author"].update(label={
        "format": {"name": "numpy"}, "data": [f"author/node_data/label-{i}.npy"
                                              for i in range(len(rows))]}))


def _overlap(folder: Path) -> None:
    val = np.load(folder / "paper/node_data/val_mask-0.npy")
    train = np.load(folder / "paper/node_data/train_mask-0.npy")
    val[np.flatnonzero(train)[0]] = True
    np.save(folder / "paper/node_data/val_mask-0.npy", val)


def _relation_twice(m: dict) -> None:
    i = m["edge_type"].index("paper:has_topic:field")
    m["edge_type"][i] = "paper:cites:field"
    m["edges"]["paper:cites:field"] = m["edges"].pop("paper:has_topic:field")


BAD = {
    "counts per type": (lambda f: _edit(f, lambda m: m["num_nodes_per_chunk"].pop()),
                        ["num_nodes_per_chunk", "expected 4 lists"]),
    "row total": (lambda f: _edit(f, lambda m: m["num_nodes_per_chunk"][0].__setitem__(0, 1)),
                  ["node_data.author.feat", "rows", "expected"]),
    "id out of range": (_bad_ids, ["writes-1.npy", "dst 1000000", "paper node ids"]),
    "unknown node type": (lambda f: _edit(f, lambda m: m["edge_type"].__setitem__(
        m["edge_type"].index("author:writes:paper"), "author:writes:book")),
        ["edge_type", "'book'", "node_type"]),
    "relation twice": (lambda f: _edit(f, _relation_twice),
                       ["edge_type", "relation 'cites'", "unique"]),
    "label on two types": (_second_label, ["node_data", "label", "author", "paper"]),
    "label on none": (lambda f: _edit(f, lambda m: m["node_data"]["paper"].pop("label")),
                      ["node_data", "label", "none"]),
    "masks elsewhere": (lambda f: _edit(f, lambda m: m["node_data"]["author"].update(
        train_mask=m["node_data"]["author"]["feat"])), ["node_data.author.train_mask"]),
    "overlapping masks": (_overlap, ["node_data.paper", "disjoint"]),
    "bad JSON": (lambda f: (f / "metadata.json").write_text('{"node_type": ['),
                 ["metadata.json", "not valid JSON"]),
    "huge node count": (lambda f: _edit(f, lambda m: m["num_nodes_per_chunk"][1].append(2 ** 40)),
                        ["num_nodes_per_chunk", "at most"]),
    "edge count vs file": (lambda f: _edit(f, lambda m: m["num_edges_per_chunk"][0].__setitem__(
        0, 5)), ["affiliated_with-0.npy", "num_edges_per_chunk says 5"]),
    "missing edges entry": (lambda f: _edit(f, lambda m: m["edges"].pop("paper:cites:paper")),
                            ["edges", "paper:cites:paper"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line(folder, case):
    change, words = BAD[case]
    change(folder)
    _one_line_error(lambda: load_chunked_hetero(folder), *words)


def test_huge_csv_edge_count_is_refused_before_reading(tmp_path, graph):
    folder = write_hetero_chunked(graph, tmp_path / "g", 2, edge_format="csv").parent
    _edit(folder, lambda m: m["num_edges_per_chunk"][2].__setitem__(0, 2 ** 40))
    _one_line_error(lambda: load_chunked_hetero(folder), "cites-0.csv", "bytes cannot hold")


def test_load_graph_and_partition_pipeline_route_typed_folders(tmp_path, folder):
    from dsgraph.cli.partition import pipeline
    cfg = DatasetConfig(name="chunked", path=str(folder), cache_dir=str(tmp_path / "data"))
    g = load_graph(cfg, "node_classification")
    assert len(g.ntypes) == 4 and any(r.startswith("rev-") for r in g.etypes)
    _one_line_error(lambda: load_graph(cfg, "link_prediction"), "heterogeneous")
    write_graph_chunks(InMemoryChunks(toy_graph()), tmp_path / "one")

    def run(path: Path, setting: str) -> str:
        return pipeline(SimpleNamespace(source="c.yaml", partition=SimpleNamespace(
            pipeline=setting), dataset=SimpleNamespace(name="chunked", path=str(path))))
    assert run(folder, "auto") == "in_memory" and run(tmp_path / "one", "auto") == "streamed"
    with pytest.raises(ConfigError) as info:
        run(folder, "streamed")
    assert "partition.pipeline" in str(info.value) and "\n" not in str(info.value)
    # a typed folder reads dataset.split / add_reverse_edges; a one-type folder refuses them
    typed = load_graph(DatasetConfig(name="chunked", path=str(folder), split=[0.5, 0.2, 0.2],
                                     add_reverse_edges=False, cache_dir=str(tmp_path / "data")))
    assert not any(r.startswith("rev-") for r in typed.etypes)
    assert int(typed.nodes["paper"].data["train_mask"].sum()) > 0
    for key, value in (("split", [0.5, 0.2, 0.2]), ("add_reverse_edges", True)):
        one = DatasetConfig(name="chunked", path=str(tmp_path / "one"),
                            cache_dir=str(tmp_path / "data"), **{key: value})
        _one_line_error(lambda: load_graph(one), f"remove dataset.{key}")


def test_writer_refusals(tmp_path, graph, folder):
    with pytest.raises(UserError, match="already exists"):
        write_hetero_chunked(graph, folder)
    write_hetero_chunked(graph, folder, 1, force=True)  # a chunked folder: replaced
    assert_same(load_chunked_hetero(folder, add_reverse_edges=False), graph)
    odd = dgl.heterograph({("a:b", "r", "c"): ([0], [0])})
    with pytest.raises(UserError, match="without ':'"):
        write_hetero_chunked(odd, tmp_path / "odd")
    assert not (tmp_path / "odd").exists()
