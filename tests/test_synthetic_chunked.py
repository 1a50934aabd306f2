"""The streamed synthetic generator (determinism, independence of the chunk size, the graph's
statistics against the in-memory generator and the model's expectations) and
``python -m partition.chunk`` (round trips through DGL's chunked format, one-line refusals)."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dsgraph.cluster import preload
from dsgraph.config import DatasetConfig
from dsgraph.data.chunked import synthetic as sc
from dsgraph.data.synthetic import generate
from dsgraph.errors import ConfigError, UserError

ROOT = Path(__file__).resolve().parents[1]
MASKS = ("train_mask", "val_mask", "test_mask")
SMALL = DatasetConfig(num_nodes=5000, avg_degree=6, num_classes=7, feat_dim=5, seed=11)
STATS = DatasetConfig(num_nodes=20000, avg_degree=10, num_classes=40, feat_dim=16, seed=3)


def edges_of(cfg: DatasetConfig, chunk_rows: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Every edge of the stream, and the chunk lengths."""
    chunks = list(sc.edge_chunks(cfg, chunk_rows))
    for s, d in chunks:
        assert s.dtype == np.int64 and d.dtype == np.int64 and len(s) == len(d)
    return (np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]),
            [len(c[0]) for c in chunks])


def nodes_of(cfg: DatasetConfig, chunk_rows: int) -> tuple[dict[str, np.ndarray], list[int]]:
    """Every key of the node stream, and the chunk lengths."""
    chunks = list(sc.node_blocks(cfg, chunk_rows))
    assert all(set(c) == {"feat", "label", *MASKS} for c in chunks)
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}, [len(c["label"])
                                                                            for c in chunks]


def check_sizes(lengths: list[int], chunk_rows: int, total: int) -> None:
    assert sum(lengths) == total
    assert all(n == chunk_rows for n in lengths[:-1]) and 0 < lengths[-1] <= chunk_rows


@pytest.fixture
def small_blocks(monkeypatch):
    """Internal blocks of 997 nodes: a small graph then spans several (and chunk sizes that are
    not multiples of a block)."""
    monkeypatch.setattr(sc, "BLOCK_ROWS", 997)


def test_stream_is_deterministic_and_independent_of_chunk_rows(small_blocks):
    src, dst, lengths = edges_of(SMALL, 1 << 20)
    nodes, node_lengths = nodes_of(SMALL, 1 << 20)
    assert len(lengths) == 1 and len(node_lengths) == 1
    for rows in (1, 613, 4096):
        if rows == 1:  # one edge a chunk: only the edges (node data of 5000 chunks is slow)
            chunks = list(sc.edge_chunks(SMALL, 1))
            assert all(len(c[0]) == 1 for c in chunks) and len(chunks) == len(src)
            continue
        s2, d2, l2 = edges_of(SMALL, rows)
        check_sizes(l2, rows, len(src))
        assert np.array_equal(s2, src) and np.array_equal(d2, dst)
        n2, nl2 = nodes_of(SMALL, rows)
        check_sizes(nl2, rows, SMALL.num_nodes)
        for k in nodes:
            assert n2[k].dtype == nodes[k].dtype and np.array_equal(n2[k], nodes[k]), k
    other, _, _ = edges_of(dataclasses.replace(SMALL, seed=12), 1000)
    assert len(other) != len(src) or not np.array_equal(other, src)


def test_refuses_targets_other_than_class():
    cfg = dataclasses.replace(SMALL, target="regression")
    for stream in (sc.edge_chunks, sc.node_blocks):
        with pytest.raises(ConfigError, match="dataset.target.*'class'.*'regression'"):
            next(stream(cfg, 100))


def test_graph_statistics(monkeypatch):
    monkeypatch.setattr(sc, "BLOCK_ROWS", 4096)  # 5 blocks: pairs repeated across blocks stay
    cfg, n = STATS, STATS.num_nodes
    src, dst, _ = edges_of(cfg, 50_000)
    nodes, _ = nodes_of(cfg, 50_000)
    label = nodes["label"]
    # Structure: no self-loops, both directions of every pair, mean in-degree ~avg_degree and
    # close to the in-memory generator's (same model, deduplicated globally there).
    assert not np.any(src == dst)
    fwd = np.sort(src * n + dst)
    assert np.array_equal(fwd, np.sort(dst * n + src))
    mean_degree = len(src) / n
    assert abs(mean_degree / cfg.avg_degree - 1) < 0.15, mean_degree
    ref = generate(cfg)
    assert abs(len(src) / ref.num_edges() - 1) < 0.05
    dup = 1 - len(np.unique(fwd)) / len(fwd)  # pairs between hubs, drawn from both ends
    assert 0 < dup < 0.05, dup
    # Heavy tail like the in-memory graph's: the largest degree far above the mean.
    deg = np.bincount(dst, minlength=n)
    ref_deg = ref.in_degrees().numpy()
    assert deg.max() > 20 * mean_degree and 0.5 < deg.max() / ref_deg.max() < 2
    # Homophily: a share h of endpoints inside the source's community, plus what uniform
    # draws land there by chance (the communities' shares of the degree, squared).
    share = np.bincount(label, weights=deg, minlength=cfg.num_classes) / deg.sum()
    expected = cfg.homophily + (1 - cfg.homophily) * np.sum(share ** 2)
    intra = np.mean(label[src] == label[dst])
    assert abs(intra - expected) < 0.03, (intra, expected)
    # Labels: uniform over the classes.
    counts = np.bincount(label, minlength=cfg.num_classes)
    assert label.dtype == np.int64 and counts.min() > 0.8 * n / cfg.num_classes
    assert counts.max() < 1.2 * n / cfg.num_classes
    # Masks: disjoint, exactly round(frac * n) each.
    masks = np.stack([nodes[m] for m in MASKS])
    assert masks.dtype == bool and masks.sum(0).max() == 1
    for m, frac in zip(MASKS, (cfg.train_frac, cfg.val_frac, cfg.test_frac)):
        assert nodes[m].sum() == round(frac * n), m
    # Features: feat_signal * mu[class] + N(0, 1): unit noise around each class mean, and class
    # means apart by what feat_signal predicts (E|mu_a - mu_b|^2 = 2 d per unit of signal^2).
    feat = nodes["feat"]
    assert feat.dtype == np.float32 and feat.shape == (n, cfg.feat_dim)
    means = np.stack([feat[label == c].mean(0) for c in range(cfg.num_classes)])
    noise = feat - means[label]
    assert abs(noise.std() - 1) < 0.03
    diff = means[:, None, :] - means[None, :, :]
    sq = (diff ** 2).sum(-1)[np.triu_indices(cfg.num_classes, 1)].mean()
    want = 2 * cfg.feat_dim * (cfg.feat_signal ** 2 + cfg.num_classes / n)
    assert abs(sq / want - 1) < 0.25, (sq, want)


def test_edge_stream_keeps_small_per_node_arrays(small_blocks):
    """The edge stream keeps O(num_nodes) small arrays: order + cumulative degrees (12 bytes a
    node here), far below one float row of the features."""
    com = sc._Communities(SMALL)
    per_node = (com.order.nbytes + com.cum.nbytes) / SMALL.num_nodes
    assert per_node <= 16 and com.order.dtype == np.int32
    assert np.all(np.diff(com.cum) > 0) and com.total == com.cum[-1]


# ---------------------------------------------------------------- the chunked folder and the CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return preload.run_command([sys.executable, "-m", "partition.chunk", *args],
                               {**os.environ, "OMP_NUM_THREADS": "1"}, str(ROOT), timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def graph_streams_equal(graph, cfg: DatasetConfig) -> None:
    """A chunked folder holds exactly the generator's streams."""
    from dsgraph.data.chunked.contract import iter_edges, read_node_key
    src, dst, _ = edges_of(cfg, 1 << 20)
    got = list(iter_edges(graph))
    assert graph.num_nodes == cfg.num_nodes and graph.num_edges == len(src)
    assert np.array_equal(np.concatenate([g[1] for g in got]), src)
    assert np.array_equal(np.concatenate([g[2] for g in got]), dst)
    nodes, _ = nodes_of(cfg, 1 << 20)
    assert sorted(k.name for k in graph.node_keys()) == sorted(nodes)
    for k, v in nodes.items():
        read = read_node_key(graph, k)
        assert read.dtype == v.dtype and np.array_equal(read, v), k


@pytest.mark.parametrize("edge_format,node_format", [("parquet", "numpy"), ("csv", "parquet"),
                                                     ("numpy", "numpy")])
def test_generate_chunked_round_trip(tmp_path, small_blocks, edge_format, node_format, capsys):
    from dsgraph.data.chunked.folder import open_chunked
    meta = sc.generate_chunked(SMALL, tmp_path / "g", chunk_rows=1500, edge_format=edge_format,
                               node_format=node_format)
    assert meta == tmp_path / "g" / "metadata.json"
    graph = open_chunked(tmp_path / "g")
    assert graph.num_edge_chunks == -(-graph.num_edges // 1500)
    graph_streams_equal(graph, SMALL)
    assert re.search(r"nodes: 5,000( of 5,000)? written", capsys.readouterr().out)
    with pytest.raises(UserError, match="exists"):  # not replaced without force
        sc.generate_chunked(SMALL, tmp_path / "g", chunk_rows=1500)
    assert open_chunked(tmp_path / "g").num_edges == graph.num_edges


def test_cli_converts_a_file_dataset(tmp_path):
    import dgl
    from dsgraph.data import load_graph
    from dsgraph.data.chunked.folder import open_chunked
    rng = np.random.default_rng(0)
    n, m = 300, 1200
    src, dst = (torch.from_numpy(rng.integers(0, n, m)) for _ in range(2))
    g = dgl.graph((src, dst), num_nodes=n)
    g.ndata["feat"] = torch.from_numpy(rng.standard_normal((n, 6)).astype(np.float32))
    g.ndata["label"] = torch.from_numpy(rng.integers(0, 4, n))
    which = rng.integers(0, 4, n)
    for i, k in enumerate(MASKS):
        g.ndata[k] = torch.from_numpy(which == i)
    path = tmp_path / "g.dgl"
    dgl.save_graphs(str(path), [g])
    out = tmp_path / "chunked"
    proc = run_cli("--set", "dataset.name=file", "--set", f"dataset.path={path}", "--out", str(out),
                   "--chunk-rows", "500")
    assert proc.returncode == 0, proc.stderr
    assert f"--set dataset.name=chunked --set dataset.path={out}" in proc.stdout
    ref = load_graph(DatasetConfig(name="file", path=str(path)))
    back = open_chunked(out)
    assert back.num_edge_chunks == 3
    got = back.to_dgl()
    assert got.num_nodes() == ref.num_nodes()
    for a, b in zip(got.edges(), ref.edges()):
        assert torch.equal(a, b)
    assert sorted(got.ndata.keys()) == sorted(ref.ndata.keys())
    for k in ref.ndata.keys():
        a, b = got.ndata[k], ref.ndata[k]
        assert a.dtype == b.dtype and torch.equal(a, b), k
    # An existing folder: refused without --force, left as it was.
    before = sorted(p.name for p in out.iterdir())
    proc = run_cli("--set", "dataset.name=file", "--set", f"dataset.path={path}", "--out", str(out))
    assert_one_line_error(proc, str(out), "--force")
    assert sorted(p.name for p in out.iterdir()) == before


def test_cli_writes_a_synthetic_graph(tmp_path):
    from dsgraph.data.chunked.folder import open_chunked
    out = tmp_path / "syn"
    sets = ["--set", "dataset.num_nodes=3000", "--set", "dataset.avg_degree=5",
            "--set", "dataset.feat_dim=8", "--set", "dataset.seed=4"]
    proc = run_cli(*sets, "--out", str(out), "--chunk-rows", "1000", "--edge-format", "numpy")
    assert proc.returncode == 0, proc.stderr
    assert "train on it with: --set dataset.name=chunked" in proc.stdout
    cfg = DatasetConfig(num_nodes=3000, avg_degree=5, feat_dim=8, seed=4)
    graph_streams_equal(open_chunked(out), cfg)
    # --force replaces a chunked folder, never a folder of something else.
    proc = run_cli(*sets, "--set", "dataset.seed=5", "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert open_chunked(out).num_edge_chunks == 1
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    proc = run_cli(*sets, "--out", str(foreign), "--force")
    assert_one_line_error(proc, "notes.txt", "not replacing")
    assert (foreign / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("sets,words", [
    (["train.mode=dsmpnn", "dataset.name=darcy"], ["'darcy'", "physics"]),
    (["dataset.target=regression", "task.name=node_regression"], ["dataset.target", "'class'"]),
])
def test_cli_refusals(tmp_path, sets, words):
    out = tmp_path / "never"
    proc = run_cli(*[a for s in sets for a in ("--set", s)], "--out", str(out))
    assert_one_line_error(proc, *words)
    assert not out.exists()
