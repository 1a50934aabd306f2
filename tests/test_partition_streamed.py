"""``python -m partition`` on a chunked folder: the streamed pipeline end to end, checked against
the source graph (every node once, every edge once, features bit-equal, halos exact), resumed
after a kill, refused where it cannot run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from dsgraph import config as config_mod
from dsgraph.cluster import preload
from dsgraph.config import DatasetConfig
from dsgraph.data.chunked.write import write_graph_chunks
from dsgraph.data.chunked.contract import InMemoryChunks
from dsgraph.data.synthetic import generate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A 3000-node community graph and its chunked folder (csv edges, 4 edge chunks)."""
    g = generate(DatasetConfig(num_nodes=3000, feat_dim=6, num_classes=5, avg_degree=6))
    folder = tmp_path_factory.mktemp("chunked") / "g"
    write_graph_chunks(InMemoryChunks(g, chunk_rows=5000), folder, edge_format="csv")
    return g, folder


def _sets(folder: Path, out: Path, **partition) -> list[str]:
    """--set options partitioning ``folder`` into ``out``."""
    sets = {"dataset.name": "chunked", "dataset.path": str(folder),
            "partition.out_dir": str(out), **{f"partition.{k}": v for k, v in partition.items()}}
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def _partition(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m partition --config configs/default.yaml ARGS`` from the repository root."""
    import os
    return preload.run_command([sys.executable, "-m", "partition", "--config",
                                "configs/default.yaml", *args],
                               {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, str(ROOT),
                               timeout=300)


def _load_parts(part_json: Path) -> list:
    """Every part as stock DGL loads it: (graph, node features, partition book)."""
    import dgl
    meta = json.loads(part_json.read_text())
    return [dgl.distributed.load_partition(str(part_json), k)[:2]
            for k in range(meta["num_parts"])]


def _check_against_source(g, part_json: Path, hops: int) -> None:
    """Every node owned once, every edge once, features bit-equal, halos exactly the nodes
    within ``hops`` of the owned ones (in- or out-neighbours) owned elsewhere."""
    parts = _load_parts(part_json)
    n = g.num_nodes()
    owner = np.full(n, -1)
    new_to_orig = {}
    for k, (pg, feats) in enumerate(parts):
        inner = pg.ndata["inner_node"].bool().numpy()
        orig = feats["_N/orig_id"].numpy()
        assert (owner[orig] == -1).all(), "a node owned twice"
        owner[orig] = k
        for key in g.ndata.keys():  # bit-equal rows, in the part's owned order
            assert torch.equal(feats[f"_N/{key}"], g.ndata[key][torch.from_numpy(orig)]), key
        new_to_orig.update(zip(pg.ndata["_ID"].numpy()[inner].tolist(), orig.tolist()))
    assert (owner >= 0).all(), "a node owned by no part"
    src, dst = (t.numpy() for t in g.edges())
    seen = []
    for k, (pg, _) in enumerate(parts):
        gid = pg.ndata["_ID"].numpy()
        s, d = (t.numpy() for t in pg.edges())
        inner_e = pg.edata["inner_edge"].bool().numpy()
        to_orig = np.vectorize(new_to_orig.get)
        seen.append(np.stack([to_orig(gid[s[inner_e]]), to_orig(gid[d[inner_e]])], 1))
        assert (owner[to_orig(gid[d[inner_e]])] == k).all(), "an edge away from its dst's part"
        # halo: every node within `hops` of an owned node (either direction), owned elsewhere
        adj = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
        adj = ((adj + adj.T) > 0).astype(np.int8)
        reach = owner == k
        for _ in range(hops):
            reach = reach | (adj @ reach.astype(np.int8) > 0)
        halo = set(np.flatnonzero(reach & (owner != k)).tolist())
        got = set(to_orig(gid[~pg.ndata["inner_node"].bool().numpy()]).tolist()) \
            if (~pg.ndata["inner_node"].bool()).any() else set()
        assert got == halo, f"part {k}: halo differs ({len(got)} vs {len(halo)} nodes)"
    edges = np.concatenate(seen)
    # the same multiset of (src, dst) pairs: each input edge in exactly one part
    assert np.array_equal(np.sort(edges[:, 0] * n + edges[:, 1]), np.sort(src * n + dst))


@pytest.mark.parametrize("hops, workers, memory_mb", [(1, 2, 0), (2, 1, 1)])
def test_streamed_partitions_hold_the_source_graph(source, tmp_path, hops, workers, memory_mb):
    g, folder = source
    out = tmp_path / "parts"
    r = _partition(_sets(folder, out, num_parts=3, halo_hops=hops, workers=workers,
                         memory_mb=memory_mb))
    assert r.returncode == 0, r.stderr
    part_json = out / "graph.json"
    _check_against_source(g, part_json, hops)
    stats = json.loads((out / "partition_stats.json").read_text())
    # memory_mb=1 leaves METIS no room: the coarsened assignment runs, and still balances
    assert stats["assignment"]["assigner"] == ("coarsened_metis" if memory_mb else "metis")
    assert stats["node_balance"] <= 1.05 + 1e-9
    assert stats["pipeline"] == "streamed"
    cfg = config_mod.load(str(ROOT / "configs/default.yaml"),
                          [s for s in _sets(folder, out, num_parts=3, halo_hops=hops)
                           if s != "--set"])
    from dsgraph.partition.integrity import verify_partitions
    verify_partitions(part_json, cfg)  # what every trainer checks first
    assert not (tmp_path / ".parts.work").exists()


def test_a_killed_run_resumes_from_its_finished_steps(source, tmp_path):
    g, folder = source
    out = tmp_path / "parts"
    args = _sets(folder, out, num_parts=2)
    r = _partition(args, env={"DSGRAPH_DISPATCH_FAIL_AFTER": "route"})
    assert r.returncode != 0 and not out.exists()
    assert (tmp_path / ".parts.work" / "assignment.npy").is_file()
    r = _partition(args)
    assert r.returncode == 0, r.stderr
    assert "assignment: reusing" in r.stdout  # and the dispatch's routed chunks:
    assert "dispatch: route: reusing" in r.stdout, r.stdout
    _check_against_source(g, out / "graph.json", 1)


def test_streamed_pipeline_refusals(source, tmp_path):
    g, folder = source
    r = _partition(["--set", "partition.pipeline=streamed"])
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "partition.pipeline: 'streamed' reads a chunked graph folder" in r.stderr
    # a folder missing a key training reads: named with the key
    bad = tmp_path / "nolabel"
    g2 = generate(DatasetConfig(num_nodes=200, feat_dim=3, num_classes=3))
    del g2.ndata["label"]
    write_graph_chunks(InMemoryChunks(g2), bad)
    r = _partition(_sets(bad, tmp_path / "p"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"{bad}: node_data has no 'label'" in r.stderr
    assert not (tmp_path / "p").exists()


def _small_folder(folder: Path) -> Path:
    """A 600-node chunked folder (csv edges, 4 edge chunks) to break."""
    g = generate(DatasetConfig(num_nodes=600, feat_dim=4, num_classes=3, avg_degree=6))
    write_graph_chunks(InMemoryChunks(g, chunk_rows=1000), folder, edge_format="csv")
    return folder


def _break_val_mask(folder: Path) -> Path:
    """A val_mask value 2: read by the dispatch's last step only (the assignment reads edges and
    train_mask), so the run fails with the assignment saved and the parts sorted."""
    path = folder / "node_data" / "val_mask-0.npy"
    mask = np.load(path).astype(np.uint8)
    mask[-1] = 2
    np.save(path, mask)
    return path


def _break_last_edge_chunk(folder: Path) -> Path:
    """An edge id past the nodes in the last edge chunk: found while the assignment reads it."""
    path = folder / "edges" / "edges-3.csv"
    lines = path.read_text().splitlines()
    lines[-1] = "0,600"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("break_input, words", [
    (_break_val_mask, "mask 'val_mask' holds values other than 0/1"),
    (_break_last_edge_chunk, "600"),
])
def test_a_failed_streamed_partition_leaves_nothing_behind(tmp_path, break_input, words):
    folder = _small_folder(tmp_path / "input" / "g")
    bad = break_input(folder)
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("the user's")
    out = home / "new" / "parts"  # its parent too is made by the run
    r = _partition(_sets(folder, out, num_parts=2, pipeline="streamed"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {bad}") and words in r.stderr, r.stderr
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]  # no .parts.work, no new/


def test_a_crash_keeps_only_resumable_work(tmp_path, monkeypatch):
    """Not a user error (here a crash after the route step): the finished steps stay for a
    rerun, and the run says so; a crash before any finished step leaves nothing."""
    from dsgraph.partition.streamed import pipeline as streamed
    folder = _small_folder(tmp_path / "g")
    out = tmp_path / "home" / "parts"
    r = _partition(_sets(folder, out, num_parts=2), env={"DSGRAPH_DISPATCH_FAIL_AFTER": "route"})
    assert r.returncode != 0 and not out.exists()
    assert f"{tmp_path / 'home' / '.parts.work'} keeps the finished steps" in r.stdout
    assert (tmp_path / "home" / ".parts.work" / "assignment.npy").is_file()

    def crash(*args, **kwargs):
        raise RuntimeError("killed")
    monkeypatch.setattr(streamed, "_assignment", crash)
    from dsgraph.data.chunked.dataset import open_dataset
    cfg = config_mod.load(None, [s for s in _sets(folder, out, num_parts=2) if s != "--set"])
    out2 = tmp_path / "other" / "deeper" / "parts"
    with pytest.raises(RuntimeError, match="killed"):
        streamed.partition_streamed(open_dataset(cfg.dataset), cfg.partition, out2)
    assert not (tmp_path / "other").exists()
