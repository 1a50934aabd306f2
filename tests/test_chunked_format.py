"""DGL's chunked graph format: round trips through the streaming writer in every format, a folder
laid out by hand as DGL's tools/chunk_graph.py writes it, bounded node-data blocks, per-chunk
edge reads, and the one-line DataError of every malformed folder."""
from __future__ import annotations

import json
import os
from pathlib import Path

import dgl
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dsgraph.data.chunked.folder import ChunkedGraph, open_chunked
from dsgraph.data.chunked.write import write_chunked, write_graph_chunks
from dsgraph.data.chunked.contract import GraphChunks, InMemoryChunks, read_node_key
from dsgraph.errors import DataError, UserError

N, E = 100, 500


def toy_graph(seed: int = 0) -> dgl.DGLGraph:
    """A small graph with float, int, 3-D and mask node data."""
    rng = np.random.default_rng(seed)
    src, dst = (torch.from_numpy(rng.integers(0, N, E)) for _ in range(2))
    g = dgl.graph((src, dst), num_nodes=N)
    g.ndata["feat"] = torch.from_numpy(rng.standard_normal((N, 4)).astype(np.float32))
    g.ndata["label"] = torch.from_numpy(rng.integers(0, 7, N))
    g.ndata["train_mask"] = torch.from_numpy(rng.random(N) < 0.3)
    g.ndata["cube"] = torch.from_numpy(rng.standard_normal((N, 2, 3)))
    return g


def assert_same_graph(h: dgl.DGLGraph, g: dgl.DGLGraph) -> None:
    assert h.num_nodes() == g.num_nodes()
    for a, b in zip(h.edges(), g.edges()):  # edge ids in order, not just the same edge set
        assert torch.equal(a.long(), b.long())
    assert sorted(h.ndata) == sorted(g.ndata)
    for k in g.ndata:
        assert h.ndata[k].dtype == g.ndata[k].dtype, k
        assert h.ndata[k].numpy().tobytes() == g.ndata[k].numpy().tobytes(), k  # bit-equal


@pytest.mark.parametrize("edge_format", ["csv", "parquet", "numpy"])
@pytest.mark.parametrize("node_format", ["numpy", "parquet"])
def test_round_trip_every_format(tmp_path, edge_format, node_format):
    g = toy_graph()
    meta = write_graph_chunks(InMemoryChunks(g, 37), tmp_path / "c", num_chunks=3,
                              edge_format=edge_format, node_format=node_format, graph_name="toy")
    assert meta == tmp_path / "c" / "metadata.json"
    doc = json.loads(meta.read_text())
    assert doc["num_edges_per_chunk"] == [[167, 167, 166]]
    assert doc["num_nodes_per_chunk"] == [[34, 33, 33]]
    c = open_chunked(tmp_path / "c")
    assert isinstance(c, GraphChunks)
    assert (c.graph_name, c.ntype, c.etype) == ("toy", "_N", "_N:_E:_N")
    assert (c.num_nodes, c.num_edges, c.num_edge_chunks) == (N, E, 3)
    assert_same_graph(c.to_dgl(), g)
    assert "toy" in repr(c) and "\n" not in repr(c)


def test_uneven_chunk_rows_and_source_chunks(tmp_path):
    g = toy_graph(1)
    write_graph_chunks(InMemoryChunks(g, 37), tmp_path / "a", chunk_rows=64)
    a = open_chunked(tmp_path / "a")
    assert list(np.diff(a.edge_offsets())) == [64] * 7 + [52]
    assert_same_graph(a.to_dgl(), g)
    # default: the source's own edge chunks (37 edges, the last 19), re-read from a folder
    write_graph_chunks(a, tmp_path / "b", edge_format="csv")
    b = open_chunked(tmp_path / "b")
    assert list(np.diff(b.edge_offsets())) == list(np.diff(a.edge_offsets()))
    write_graph_chunks(InMemoryChunks(g, 37), tmp_path / "d")
    d = open_chunked(tmp_path / "d")
    assert list(np.diff(d.edge_offsets())) == [37] * 13 + [19]
    assert_same_graph(b.to_dgl(), g)
    assert_same_graph(d.to_dgl(), g)


def test_folder_laid_out_like_dgl_chunk_graph(tmp_path):
    """metadata.json as DGL's docs show it, CSV edges with a ' ' delimiter, npy files that split
    the nodes differently from num_nodes_per_chunk, an absolute path, parquet as DGL's
    array_readwriter writes it (a column per dimension, 'shape'), Spark's vector column, an
    integer mask, and edge_data that dsgraph ignores."""
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, N, E), rng.integers(0, N, E)
    feat = rng.standard_normal((N, 3)).astype(np.float32)
    label = rng.integers(0, 4, N)
    mask = (rng.random(N) < 0.5).astype(np.uint8)
    emb = rng.standard_normal((N, 2))
    (tmp_path / "edges").mkdir()
    (tmp_path / "node_data").mkdir()
    np.savetxt(tmp_path / "edges/e-0.csv", np.stack([src[:200], dst[:200]], 1), fmt="%d")
    np.savetxt(tmp_path / "edges/e-1.csv", np.stack([src[200:], dst[200:]], 1), fmt="%d",
               delimiter=" ")
    for i, (lo, hi) in enumerate([(0, 30), (30, 60), (60, N)]):
        # one file big-endian and Fortran-ordered, as other writers may leave it
        np.save(tmp_path / f"node_data/feat-{i}.npy",
                np.asfortranarray(feat[lo:hi].astype(">f4")) if i == 1 else feat[lo:hi])
        np.save(tmp_path / f"node_data/train_mask-{i}.npy", mask[lo:hi])
    for i, (lo, hi) in enumerate([(0, 40), (40, N)]):
        table = pa.Table.from_pandas(pd.DataFrame(label[lo:hi]))
        pq.write_table(table.replace_schema_metadata({"shape": str((hi - lo,))}),
                       tmp_path / f"node_data/label-{i}.parquet")
        pq.write_table(pa.table({"vector": pa.array(emb[lo:hi].tolist())}),
                       tmp_path / f"node_data/emb-{i}.parquet")
    npy = {"name": "numpy"}
    meta = {"graph_name": "hand", "node_type": ["paper"], "num_nodes_per_chunk": [[40, 60]],
            "edge_type": ["paper:cites:paper"], "num_edges_per_chunk": [[200, 300]],
            "edges": {"paper:cites:paper": {"format": {"name": "csv", "delimiter": " "},
                                            "data": ["edges/e-0.csv",
                                                     str(tmp_path / "edges/e-1.csv")]}},
            "node_data": {"paper": {
                "feat": {"format": npy, "data": [f"node_data/feat-{i}.npy" for i in range(3)]},
                "train_mask": {"format": npy,
                               "data": [f"node_data/train_mask-{i}.npy" for i in range(3)]},
                "label": {"format": {"name": "parquet"},
                          "data": [f"node_data/label-{i}.parquet" for i in range(2)]},
                "emb": {"format": {"name": "parquet"},
                        "data": [f"node_data/emb-{i}.parquet" for i in range(2)]}}},
            "edge_data": {"paper:cites:paper": {"w": {"format": npy, "data": ["nowhere.npy"]}}}}
    (tmp_path / "meta.json").write_text(json.dumps(meta, indent=4))  # the name in DGL's guide
    c = open_chunked(tmp_path / "meta.json")
    assert (c.graph_name, c.ntype, c.etype, c.num_edge_chunks) == ("hand", "paper",
                                                                  "paper:cites:paper", 2)
    keys = {k.name: (k.dtype, k.row_shape) for k in c.node_keys()}
    assert keys == {"feat": (np.float32, (3,)), "train_mask": (bool, ()), "label": (np.int64, ()),
                    "emb": (np.float64, (2,))}
    h = c.to_dgl()
    assert np.array_equal(h.edges()[0].numpy(), src) and np.array_equal(h.edges()[1].numpy(), dst)
    assert np.array_equal(h.ndata["feat"].numpy(), feat)
    assert np.array_equal(h.ndata["label"].numpy(), label)
    assert np.array_equal(h.ndata["emb"].numpy(), emb)
    assert h.ndata["train_mask"].dtype == torch.bool
    assert np.array_equal(h.ndata["train_mask"].numpy(), mask.astype(bool))


@pytest.mark.parametrize("node_format", ["numpy", "parquet"])
def test_iter_node_data_blocks_are_bounded_and_in_order(tmp_path, node_format):
    g = toy_graph(2)
    write_graph_chunks(InMemoryChunks(g), tmp_path / "c", chunk_rows=45, node_format=node_format)
    cap = 7 * 4 * 4  # seven rows of feat (4 float32)
    c = open_chunked(tmp_path / "c", block_bytes=cap)
    for key in ("feat", "cube", "train_mask"):
        expect, at, sizes = g.ndata[key].numpy(), 0, []
        for start, rows in c.iter_node_data(key):
            assert start == at and rows.nbytes <= max(cap, rows[:1].nbytes)
            base = rows
            while base is not None:  # copied out: nothing under the rows maps the file
                assert not isinstance(base, (np.memmap, memoryview)), type(base)
                base = getattr(base, "base", None)
            assert np.array_equal(rows, expect[start:start + len(rows)])
            at += len(rows)
            sizes.append(len(rows))
        assert at == N
        if key == "feat":  # files of 45, 45, 10 rows cut at 7: blocks never span two files
            assert sizes == [7] * 6 + [3] + [7] * 6 + [3] + [7, 3]
    assert np.array_equal(read_node_key(c, "label"), g.ndata["label"].numpy())


def test_read_edges_per_chunk(tmp_path):
    g = toy_graph(3)
    write_graph_chunks(InMemoryChunks(g), tmp_path / "c", chunk_rows=120, edge_format="csv")
    c = open_chunked(tmp_path / "c")
    off = c.edge_offsets()
    assert list(off) == [0, 120, 240, 360, 480, 500]
    src, dst = (t.numpy() for t in g.edges())
    for k in range(c.num_edge_chunks):
        s, d = c.read_edges(k)
        assert s.dtype == np.int64 and d.dtype == np.int64
        assert np.array_equal(s, src[off[k]:off[k + 1]])
        assert np.array_equal(d, dst[off[k]:off[k + 1]])
    with pytest.raises(IndexError):
        c.read_edges(5)


# ------------------------------------------------------------------ malformed folders


def _folder(tmp_path: Path, edge_format: str = "csv", node_format: str = "numpy") -> Path:
    write_graph_chunks(InMemoryChunks(toy_graph()), tmp_path / "c", num_chunks=2,
                       edge_format=edge_format, node_format=node_format)
    return tmp_path / "c"


def _edit(folder: Path, change) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    change(meta)
    (folder / "metadata.json").write_text(json.dumps(meta))


def _one_line_error(fn, *names: str) -> str:
    with pytest.raises(DataError) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    for name in names:
        assert name in msg, (name, msg)
    return msg


def _load(folder: Path):
    return lambda: open_chunked(folder).to_dgl()


def test_missing_metadata_and_not_json(tmp_path):
    c = _folder(tmp_path)
    (c / "metadata.json").unlink()
    _one_line_error(_load(c), "metadata.json", "not found")
    (c / "metadata.json").write_text('{"graph_name": "g", "node_type": [')
    _one_line_error(_load(c), "metadata.json", "not valid JSON")
    _one_line_error(lambda: open_chunked(tmp_path / "nowhere"), "nowhere", "not found")


def test_missing_chunk_file(tmp_path):
    c = _folder(tmp_path)
    (c / "edges/edges-1.csv").unlink()
    _one_line_error(_load(c), "edges-1.csv", "not found", "metadata.json")
    c2 = _folder(tmp_path / "2")
    (c2 / "node_data/feat-0.npy").unlink()
    (c2 / "node_data/feat-0.npy").mkdir()
    _one_line_error(_load(c2), "feat-0.npy", "regular file")


@pytest.mark.parametrize("edge_format", ["csv", "parquet", "numpy"])
def test_wrong_num_edges_per_chunk(tmp_path, edge_format):
    c = _folder(tmp_path, edge_format)
    _edit(c, lambda m: m["num_edges_per_chunk"][0].__setitem__(1, 249))
    msg = _one_line_error(_load(c), "edges-1.", "249")
    if edge_format != "csv":  # found at open, from the header / footer: both counts named
        assert "holds 250 edges" in msg
    c2 = _folder(tmp_path / "2", edge_format)
    _edit(c2, lambda m: m["num_edges_per_chunk"][0].append(0))
    _one_line_error(_load(c2), "num_edges_per_chunk", "expected 3 files")


def test_wrong_row_total_and_shapes_of_a_node_key(tmp_path):
    c = _folder(tmp_path)
    np.save(c / "node_data/feat-1.npy", np.zeros((49, 4), np.float32))
    msg = _one_line_error(_load(c), "node_data._N.feat", "49 rows", "expected 50", "chunk 1")
    assert msg.startswith(f"{c / 'node_data/feat-1.npy'}: holds 49 rows"), msg  # the file first
    np.save(c / "node_data/feat-1.npy", np.zeros((50, 5), np.float32))
    _one_line_error(_load(c), "feat-1.npy", "(5,)", "(4,)")
    np.save(c / "node_data/feat-1.npy", np.array([["a"] * 4] * 50))
    _one_line_error(_load(c), "feat-1.npy", "dtype <U1")
    c2 = _folder(tmp_path / "2", node_format="parquet")
    pq.write_table(pa.table({"0": pa.array(["x"] * 50)}), c2 / "node_data/label-1.parquet")
    _one_line_error(_load(c2), "label-1.parquet", "numeric")
    pq.write_table(pa.table({"v": pa.array([[1.0, 2.0]] * 50)}), c2 / "node_data/label-0.parquet")
    ragged = pa.table({"v": pa.array([[1.0, 2.0]] * 49 + [[1.0]])})  # row 49 is short
    pq.write_table(ragged, c2 / "node_data/label-1.parquet")
    _one_line_error(_load(c2), "label-1.parquet", "lists of 2 values")
    code = pa.table({"0": pa.array(np.zeros(50))}).replace_schema_metadata(
        {"shape": "__import__('os').getcwd()"})  # parsed as a literal, never evaluated
    pq.write_table(code, c2 / "node_data/label-1.parquet")
    _one_line_error(_load(c2), "label-1.parquet", "schema entry 'shape'")


def test_a_short_node_data_file_is_named_where_the_files_do_not_follow_the_chunks(tmp_path):
    c = _folder(tmp_path)
    feat = np.load(c / "node_data/feat-0.npy")
    np.save(c / "node_data/feat-0.npy", feat[:-1])  # also off its chunk: which is short, unknown
    np.save(c / "node_data/feat-1.npy", np.zeros((52, 4), np.float32))
    msg = _one_line_error(_load(c), "node_data._N.feat", "101 rows (49 + 52)", "expected 100")
    assert msg.startswith(f"{c / 'node_data/feat-1.npy'}: the last of its 2 files"), msg
    _edit(c, lambda m: m["node_data"]["_N"]["feat"].update(data=["node_data/feat-0.npy"]))
    msg = _one_line_error(_load(c), "expected 100")
    assert msg.startswith(f"{c / 'node_data/feat-0.npy'}: its only file"), msg


def test_wrong_edge_dtypes_and_garbage(tmp_path):
    c = _folder(tmp_path, "numpy")
    np.save(c / "edges/edges-0.npy", np.zeros((250, 2), np.float64))
    _one_line_error(_load(c), "edges-0.npy", "integer")
    c2 = _folder(tmp_path / "2", "csv")
    lines = (c2 / "edges/edges-1.csv").read_text().splitlines()
    lines[10] = "3 1.5"
    (c2 / "edges/edges-1.csv").write_text("\n".join(lines) + "\n")
    _one_line_error(_load(c2), "edges-1.csv", "integer node ids")
    lines[10] = "3 abc"
    (c2 / "edges/edges-1.csv").write_text("\n".join(lines) + "\n")
    _one_line_error(_load(c2), "edges-1.csv", "abc")
    lines[10] = "3 4 5"
    (c2 / "edges/edges-1.csv").write_text("\n".join(lines) + "\n")
    _one_line_error(_load(c2), "edges-1.csv")
    c3 = _folder(tmp_path / "3", "parquet")
    pq.write_table(pa.table({"0": pa.array([0.5] * 250), "1": pa.array([1.0] * 250)}),
                   c3 / "edges/edges-0.parquet")
    _one_line_error(_load(c3), "edges-0.parquet", "two integer columns")


def test_node_id_out_of_range(tmp_path):
    c = _folder(tmp_path, "csv")
    lines = (c / "edges/edges-1.csv").read_text().splitlines()
    lines[7] = f"3 {N}"
    (c / "edges/edges-1.csv").write_text("\n".join(lines) + "\n")
    g = open_chunked(c)
    g.read_edges(0)  # the other chunk is fine
    _one_line_error(lambda: g.read_edges(1), "edges-1.csv", "edge 7", f"dst {N}", "[0, 100)")
    c2 = _folder(tmp_path / "2", "numpy")
    np.save(c2 / "edges/edges-0.npy", np.full((250, 2), -1, np.int64))
    _one_line_error(_load(c2), "edges-0.npy", "src -1")


def test_npy_header_claiming_more_than_the_file(tmp_path):
    c = _folder(tmp_path)
    with open(c / "node_data/feat-0.npy", "wb") as fh:  # a terabyte claimed, 64 bytes held
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12 // 16, 4)})
        fh.write(b"\0" * 64)
    _one_line_error(_load(c), "feat-0.npy", "header says shape")
    (c / "node_data/feat-0.npy").write_bytes(b"not an npy file at all")
    _one_line_error(_load(c), "feat-0.npy", "not a readable .npy")


def test_heterogeneous_and_bad_metadata_values(tmp_path):
    c = _folder(tmp_path)
    _edit(c, lambda m: m.update(node_type=["author", "paper"]))
    _one_line_error(_load(c), "node_type", "author", "paper")
    original = (c / "metadata.json").read_text()
    for change, words in [
            (lambda m: m.update(node_type=["_N"], edge_type=["_N:a:_N", "_N:b:_N"]), ["edge_type"]),
            (lambda m: m.update(edge_type=["_N:_E:_N"], num_nodes_per_chunk=[[50, -1]]),
             ["num_nodes_per_chunk", "-1"]),
            (lambda m: m.update(num_nodes_per_chunk=[[2 ** 31, 1]]), ["num_nodes_per_chunk"]),
            (lambda m: m.update(num_nodes_per_chunk=[[50, True]]), ["num_nodes_per_chunk"]),
            (lambda m: m["edges"]["_N:_E:_N"]["format"].update(name="tsv"), ["format.name", "tsv"]),
            (lambda m: m.update(num_nodes_per_chunk=[[50, 50]], node_data={"other": {}}),
             ["node_data", "other"])]:
        (c / "metadata.json").write_text(original)
        _edit(c, lambda m: m.update(node_type=["_N"]))
        _edit(c, change)
        _one_line_error(_load(c), "metadata.json", *words)


# ------------------------------------------------------------------ the writer


def test_writer_refuses_existing_folder_and_replaces_with_force(tmp_path):
    g = toy_graph()
    out = tmp_path / "c"
    write_graph_chunks(InMemoryChunks(g), out)
    with pytest.raises(UserError, match="already exists"):
        write_graph_chunks(InMemoryChunks(g), out)
    g2 = toy_graph(9)
    write_graph_chunks(InMemoryChunks(g2), out, force=True, edge_format="csv")
    assert_same_graph(open_chunked(out).to_dgl(), g2)
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    with pytest.raises(UserError, match="not a chunked graph folder"):
        write_graph_chunks(InMemoryChunks(g), other, force=True)
    assert (other / "thesis.tex").read_text() == "x"


def _blocks(bad_at: int, bad: dict):
    rng = np.random.default_rng(0)
    for i in range(4):
        yield bad if i == bad_at else {"feat": rng.standard_normal((25, 3)).astype(np.float32),
                                       "label": rng.integers(0, 3, 25)}


@pytest.mark.parametrize("bad, words", [
    ({"feat": np.zeros((25, 3), np.float32)}, ["node block 2", "keys"]),
    ({"feat": np.zeros((25, 4), np.float32), "label": np.zeros(25, np.int64)},
     ["node block 2", "feat"]),
    ({"feat": np.zeros((25, 3), np.float64), "label": np.zeros(25, np.int64)},
     ["node block 2", "float32"]),
    ({"feat": np.zeros((24, 3), np.float32), "label": np.zeros(25, np.int64)},
     ["node block 2", "row counts"]),
    ({"feat": np.zeros((26, 3), np.float32), "label": np.zeros(26, np.int64)},
     ["node block 3", "ends at node 101", "beyond num_nodes"])])
def test_writer_leaves_nothing_when_node_blocks_are_inconsistent(tmp_path, bad, words):
    edges = ((np.arange(10), np.arange(10)) for _ in range(3))
    with pytest.raises(DataError) as info:
        write_chunked(tmp_path / "out", N, edges, _blocks(2, bad))
    assert all(w in str(info.value) for w in words), str(info.value)
    assert os.listdir(tmp_path) == []  # neither the folder nor a temporary one


def test_writer_streams_generators_and_checks_totals(tmp_path):
    def edges():
        for lo in range(0, E, 200):
            yield np.arange(lo, min(E, lo + 200)) % N, np.arange(lo, min(E, lo + 200)) % 7
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((N, 2)).astype(np.float32)
    meta = write_chunked(tmp_path / "c", N, edges(),
                         ({"feat": feats[lo:lo + 30]} for lo in range(0, N, 30)), edge_format="csv")
    c = open_chunked(meta.parent)
    assert list(np.diff(c.edge_offsets())) == [200, 200, 100]
    assert np.array_equal(read_node_key(c, "feat"), feats)
    assert json.loads(meta.read_text())["num_nodes_per_chunk"] == [[30, 30, 30, 10]]
    with pytest.raises(DataError, match="cover 90 nodes, expected num_nodes 100"):
        write_chunked(tmp_path / "d", N, edges(),
                      ({"feat": feats[lo:lo + 30]} for lo in range(0, 90, 30)))
    with pytest.raises(DataError, match="edge chunk 0"):
        write_chunked(tmp_path / "d", N, [(np.array([0, N]), np.array([1, 2]))], [])
    assert not (tmp_path / "d").exists()
    write_chunked(tmp_path / "e", 5, [], [])  # no edges, no node data
    empty = open_chunked(tmp_path / "e")
    assert (empty.num_nodes, empty.num_edges, empty.node_keys()) == (5, 0, [])
    assert empty.to_dgl().num_nodes() == 5
    assert isinstance(empty, ChunkedGraph)
