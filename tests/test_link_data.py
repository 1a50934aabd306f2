"""Link prediction's data from users' folders: OGB link-property folders (ogbl-collab-like with
shared negative pairs, ogbl-citation2-like with per-positive negatives, ogbl-ddi-like without
node features) and DGL CSV folders with edge masks; their given split used instead of a drawn
one, no held-out pair left in the graph, negatives stored; every bad input one line naming the
file; ``python -m partition`` writing the given split to ``link_split.npz``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dsgraph.cluster import preload
from dsgraph.config import DatasetConfig
from dsgraph.data import load_graph
from dsgraph.data.link_split import apply_given_split, check_no_leak, given_split, pair_keys
from dsgraph.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
N, F, NEG, K = 80, 3, 20, 5  # nodes, feature width, shared negative pairs, negatives per positive


def _pairs(seed: int = 0) -> dict[str, np.ndarray]:
    """Distinct undirected pairs (src < dst) split 70 / 15 / 15."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, N, 400), rng.integers(0, N, 400)
    keep = a != b
    pairs = np.unique(np.sort(np.stack([a[keep], b[keep]], 1), 1), axis=0)
    pairs = pairs[rng.permutation(len(pairs))][:200]
    return {"train": pairs[:140], "val": pairs[140:170], "test": pairs[170:200]}


def _gz(path: Path, values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(values).to_csv(path, header=False, index=False)


def write_ogbl(root: Path, split: dict, name: str, directed: bool = False,
               feat: bool = True) -> Path:
    """An OGB link folder: raw/ holds the training edges (as OGB's graph), split/<name>/*.pt
    torch.save'd dicts of tensors (``edge`` + ``edge_neg``, or ``source_node`` /
    ``target_node`` + ``target_node_neg``)."""
    raw = root / "raw"
    rng = np.random.default_rng(7)
    _gz(raw / "edge.csv.gz", split["train"])
    _gz(raw / "num-node-list.csv.gz", [N])
    _gz(raw / "num-edge-list.csv.gz", [len(split["train"])])
    if feat:
        _gz(raw / "node-feat.csv.gz", rng.standard_normal((N, F)).astype(np.float32))
    folder = root / "split" / name
    folder.mkdir(parents=True)
    for stem, key in (("train", "train"), ("valid", "val"), ("test", "test")):
        p = torch.from_numpy(split[key])
        if directed:
            d = {"source_node": p[:, 0].clone(), "target_node": p[:, 1].clone()}
            if key != "train":
                d["target_node_neg"] = torch.from_numpy(rng.integers(0, N, (len(p), K)))
        else:
            d = {"edge": p, "weight": torch.ones(len(p), 1), "year": torch.zeros(len(p), 1)}
            if key != "train":
                d["edge_neg"] = torch.from_numpy(rng.integers(0, N, (NEG, 2)))
        torch.save(d, folder / f"{stem}.pt")
    return root


def _load(path: Path, **kw):
    return load_graph(DatasetConfig(name="ogb", path=str(path), **kw))


def _edge_keys(g) -> np.ndarray:
    src, dst = (t.numpy() for t in g.edges())
    return pair_keys(src, dst, g.num_nodes())


def test_collab_like_folder_gives_its_split_and_shared_negatives(tmp_path):
    split = _pairs()
    split["train"] = np.concatenate([split["train"], split["val"][:1]])  # repeats a val pair
    root = write_ogbl(tmp_path / "ogbl_collab", split, "time")
    g = _load(root)
    assert g.num_nodes() == N and g.ndata["feat"].shape == (N, F)
    assert g.num_edges() == 2 * len(split["train"])  # add_inverse_edge: True for collab
    given = given_split(g)
    assert given is not None and not given.directed
    out, arrays, repeats = apply_given_split(g, given)
    assert repeats == 1
    for k in ("val", "test"):
        assert np.array_equal(arrays[k], split[k]) and check_no_leak(out, arrays[k]) == 0
        neg = torch.load(root / "split/time" / f"{'valid' if k == 'val' else k}.pt")["edge_neg"]
        assert np.array_equal(arrays[f"{k}_neg_pairs"], neg.numpy())
    assert np.array_equal(arrays["train"], split["train"][:-1])
    keys = _edge_keys(out)
    assert out.num_edges() == 2 * 140  # both directions of every training pair, nothing else
    assert np.isin(keys, pair_keys(arrays["train"][:, 0], arrays["train"][:, 1], N)).all()
    assert set(arrays) == {"train", "val", "test", "val_neg_pairs", "test_neg_pairs"}


def test_citation2_like_folder_keeps_direction_and_per_positive_negatives(tmp_path):
    split = {k: v[:, ::-1].copy() for k, v in _pairs(1).items()}  # sources > targets
    root = write_ogbl(tmp_path / "ogbl-citation2", split, "time", directed=True)
    g = _load(root)
    assert g.num_edges() == len(split["train"])  # add_inverse_edge: False for citation2
    given = given_split(g)
    assert given.directed
    out, arrays, repeats = apply_given_split(g, given)
    assert repeats == 0 and out.num_edges() == len(split["train"])
    for k in ("val", "test"):
        assert np.array_equal(arrays[k], split[k]) and (arrays[k][:, 0] > arrays[k][:, 1]).all()
        assert arrays[f"{k}_neg_dst"].shape == (len(split[k]), K)
        assert check_no_leak(out, arrays[k]) == 0


def test_ddi_like_folder_without_features_gets_degree_features(tmp_path):
    split = _pairs(2)
    g = _load(write_ogbl(tmp_path / "ddi", split, "target", feat=False))
    degree = np.bincount(split["train"].reshape(-1), minlength=N)
    feat = g.ndata["feat"].numpy()
    assert feat.shape == (N, 2) and (feat[:, 0] == 1).all()
    assert np.allclose(feat[:, 1], np.log1p(degree))
    assert bool(g.ndata["train_mask"].all()) and not bool(g.ndata["val_mask"].any())


def write_csv(folder: Path, split: dict, extra: dict | None = None) -> Path:
    """A DGL CSV folder whose edges carry train_mask / val_mask / test_mask (node ids 10 + i)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    pd.DataFrame({"node_id": 10 + np.arange(N),
                  "feat": [", ".join(map(str, r)) for r in rng.standard_normal((N, F))],
                  "label": rng.integers(0, 3, N), "train_mask": np.ones(N, bool),
                  "val_mask": np.zeros(N, bool), "test_mask": np.zeros(N, bool)}
                 ).to_csv(folder / "nodes.csv", index=False)
    rows = np.concatenate([split["train"], split["val"], split["test"]])
    cols = {"src_id": 10 + rows[:, 1], "dst_id": 10 + rows[:, 0]}  # stored dst < src
    sizes = [len(split[k]) for k in ("train", "val", "test")]
    for i, key in enumerate(("train_mask", "val_mask", "test_mask")):
        cols[key] = np.repeat(np.arange(3) == i, sizes)
    cols.update(extra or {})
    pd.DataFrame(cols).to_csv(folder / "edges.csv", index=False)
    (folder / "meta.yaml").write_text("dataset_name: toy\nedge_data:\n- file_name: edges.csv\n"
                                      "node_data:\n- file_name: nodes.csv\n")
    return folder


def test_csv_edge_masks_are_the_split_and_no_pair_leaks(tmp_path):
    split = _pairs(3)
    # the reverse of a validation edge marked train: it must leave the graph too
    split["train"] = np.concatenate([split["train"], split["val"][:1, ::-1]])
    folder = write_csv(tmp_path / "toy", split)
    cfg = DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "c"),
                        add_reverse_edges=True)
    for _ in range(2):  # parsed, then from the cache: the masks survive it
        g = load_graph(cfg)
        assert g.num_edges() == 2 * 201 and bool(g.ndata["train_mask"].all())
        out, arrays, repeats = apply_given_split(g, given_split(g))
        assert repeats == 1
        for k in ("val", "test"):
            assert np.array_equal(arrays[k], np.unique(split[k], axis=0))
            assert check_no_leak(out, arrays[k]) == 0
        assert out.num_edges() == 2 * 140 and set(arrays) == {"train", "val", "test"}


@pytest.mark.parametrize("extra, message", [
    ({"label": 1}, "edges.csv: edge column 'label' (edge labels or negative edges): link "
                   "prediction takes positive edges only; remove the column and any negative rows"),
    ({"test_mask": None}, "edges.csv: missing edge column test_mask (found train_mask, "
                          "val_mask); give all three edge masks or none and task.edge_split"),
    ({"val_mask": True}, "edges.csv: edge at line 2 is in several of train_mask, val_mask, "
                         "test_mask; expected one"),
])
def test_csv_edge_split_problems_are_raised_for_link_prediction_only(tmp_path, extra, message):
    split = _pairs(4)
    drop = [k for k, v in extra.items() if v is None]
    folder = write_csv(tmp_path / "toy", split, {k: v for k, v in extra.items() if v is not None})
    if drop:
        df = pd.read_csv(folder / "edges.csv")
        df.drop(columns=drop).to_csv(folder / "edges.csv", index=False)
    g = load_graph(DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "c")))
    assert g.num_nodes() == N  # a node task reads the folder as before
    with pytest.raises(DataError) as err:
        given_split(g)
    assert str(err.value) == f"{folder}/{message}"


def test_csv_edge_mask_values_are_checked(tmp_path):
    folder = write_csv(tmp_path / "toy", _pairs(5), {"val_mask": 2})
    with pytest.raises(DataError) as err:
        load_graph(DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "c")))
    assert str(err.value) == f"{folder}/edges.csv: val_mask: expected True/False or 0/1, got " \
                             f"'2' at line 2"


class Payload:
    """Unpickling it would create a file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _save(name: str, fn):
    """Rewrite split/time/<name> with fn(the dict it holds)."""
    def change(root: Path) -> None:
        p = root / "split" / "time" / name
        torch.save(fn(torch.load(p, weights_only=True), root), p)
    return change


def _garbage(root: Path) -> None:
    (root / "split/time/test.pt").write_bytes(b"not a torch file")


@pytest.mark.parametrize("change, message", [
    (lambda r: (r / "split/time/valid.pt").unlink(),
     "split/time/valid.pt: file not found (part of the OGB link split: train.pt, valid.pt, "
     "test.pt)"),
    (_save("test.pt", lambda d, r: {**d, "edge_neg": np.zeros((3, 2))}),
     "split/time/test.pt: holds numpy.core.multiarray._reconstruct, which dsgraph does not "
     "unpickle (only tensors, lists and dicts: others can run code); save a dict of tensors"),
    (_save("test.pt", lambda d, r: {**d, "edge": Payload(r / "ran")}),
     "split/time/test.pt: holds io.open, which dsgraph does not unpickle"),
    (_garbage, "split/time/test.pt: not a readable torch.save file"),
    (_save("train.pt", lambda d, r: d["edge"]),
     "split/time/train.pt: expected a dict of tensors, got Tensor"),
    (_save("valid.pt", lambda d, r: {"edges": d["edge"]}),
     "split/time/valid.pt: missing key 'edge' (or 'source_node' and 'target_node'); found "
     "'edges'"),
    (_save("valid.pt", lambda d, r: {**d, "edge": torch.zeros(4, 3, dtype=torch.long)}),
     "split/time/valid.pt: edge: expected shape (*, 2), got (4, 3)"),
    (_save("valid.pt", lambda d, r: {**d, "edge": d["edge"].float()}),
     "split/time/valid.pt: edge: expected integer node ids, got dtype torch.float32"),
    (_save("valid.pt", lambda d, r: {**d, "edge": d["edge"].tolist()}),
     "split/time/valid.pt: edge: expected a tensor, got list"),
    (_save("test.pt", lambda d, r: {**d, "edge": d["edge"] + N // 2}),
     "split/time/test.pt: edge: "),  # the count depends on the draw: checked below
    (_save("test.pt", lambda d, r: {**d, "edge_neg": torch.tensor([[0, N]])}),
     f"split/time/test.pt: edge_neg: 1 node ids outside [0, {N}) (num-node-list), first {N} "
     f"at row 0"),
    (_save("test.pt", lambda d, r: {"source_node": d["edge"][:, 0], "target_node":
                                    d["edge"][:, 1]}),
     "split/time/test.pt: holds source_node/target_node pairs but train.pt holds edge; "
     "expected one layout"),
    (_save("test.pt", lambda d, r: {**d, "edge": d["edge"][:0]}),
     "split/time/test.pt: expected at least one edge, got none"),
])
def test_bad_ogbl_inputs_are_one_line_naming_the_file(tmp_path, change, message):
    root = write_ogbl(tmp_path / "ogbl_collab", _pairs(), "time")
    change(root)
    with pytest.raises(DataError) as err:
        _load(root)
    text = str(err.value)
    assert text.startswith(f"{root}/{message}") and "\n" not in text
    if message.endswith("edge: "):
        assert f"node ids outside [0, {N}) (num-node-list)" in text
    assert not (root / "ran").exists()  # the payload was never unpickled


def test_ogbl_refusals_are_one_line(tmp_path):
    root = write_ogbl(tmp_path / "ogbl_collab", _pairs(), "time")
    with pytest.raises(DataError, match=r"ogbl_collab: an OGB link folder ships its edge split "
                                        r"and has no node labels; dataset.split"):
        _load(root, split=[0.8, 0.1, 0.1])
    cfg = DatasetConfig(name="ogb", path=str(root))
    with pytest.raises(DataError, match=r"ogbl_collab: an OGB link-property folder .* expected "
                                        r"task.name link_prediction, got 'node_classification'"):
        load_graph(cfg, "node_classification")
    assert load_graph(cfg, "link_prediction").num_nodes() == N
    kg = write_ogbl(tmp_path / "ogbl_wikikg2", _pairs(), "time")
    with pytest.raises(DataError, match=r"ogbl_wikikg2: a knowledge graph"):
        _load(kg)
    both = _pairs()
    both["test"] = np.concatenate([both["test"], both["val"][:2]])
    overlap = write_ogbl(tmp_path / "ogbl-ddi", both, "target")
    g = _load(overlap)
    with pytest.raises(DataError, match=r"split/target: 2 node pairs are both validation and "
                                        r"test edges"):
        apply_given_split(g, given_split(g))
    unknown = write_ogbl(tmp_path / "mylinks", _pairs(), "mine")
    with pytest.raises(DataError, match=r"mylinks: not a known OGB dataset name .* set "
                                        r"dataset.add_reverse_edges"):
        _load(unknown)
    assert _load(unknown, add_reverse_edges=True).num_edges() == 2 * 140


def _cli(cfg: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return preload.run_command([sys.executable, "-m", "partition", "--config", str(cfg), *extra],
                               {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                               str(cwd), timeout=120)


@pytest.mark.timeout(200)
def test_partition_cli_writes_the_given_split(tmp_path):
    split = _pairs()
    root = write_ogbl(tmp_path / "ogbl-collab", split, "time")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
dataset: {{name: ogb, path: {root}}}
task: {{name: link_prediction}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
train: {{mode: sampled}}
""")
    r = _cli(cfg, tmp_path, "--set", "task.edge_split=[0.5, 0.2, 0.3]")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        f"error: {root}: ships its own edge split ({root}/split/time); task.edge_split "
        f"[0.5, 0.2, 0.3] cannot replace it: remove task.edge_split"), r.stderr[-2000:]
    r = _cli(cfg, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"task.edge_split: not used; {root} ships its own edge split" in r.stdout
    assert "edge split: train 140, val 30, test 30 undirected edges" in r.stdout
    meta = json.loads((tmp_path / "parts" / "graph.json").read_text())
    assert "link_split.npz" in meta["dsgraph"]["files"]
    with np.load(tmp_path / "parts" / meta["link_split"]) as stored:
        assert sorted(stored.files) == ["test", "test_neg_pairs", "train", "val", "val_neg_pairs"]
        for k in ("train", "val", "test"):
            assert np.array_equal(stored[k], split[k])
        neg = torch.load(root / "split/time/valid.pt", weights_only=True)["edge_neg"].numpy()
        assert np.array_equal(stored["val_neg_pairs"], neg)
    stats = json.loads((tmp_path / "parts" / "partition_stats.json").read_text())
    assert stats["num_nodes"] == N and stats["num_edges"] == 2 * 140


# --- a CSV folder with no labels and no masks (issue 46, items 6.2 and 6.3) -----------------

def write_plain_csv(folder: Path, seed: int = 4) -> tuple[Path, np.ndarray, np.ndarray]:
    """A DGL CSV folder of ``node_id`` and ``feat`` only (no label, no masks) and plain edges
    (no edge masks); its node ids (scrambled, negative ones too) and its edges in those ids."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.arange(-40, 7 * N - 40, 7))[:N]  # distinct, in no order
    pd.DataFrame({"node_id": ids,
                  "feat": [", ".join(map(str, r)) for r in rng.standard_normal((N, F))]}
                 ).to_csv(folder / "nodes.csv", index=False)
    pairs = np.concatenate([_pairs(seed)[k] for k in ("train", "val", "test")])
    edges = ids[pairs]
    pd.DataFrame({"src_id": edges[:, 0], "dst_id": edges[:, 1]}).to_csv(folder / "edges.csv",
                                                                        index=False)
    (folder / "meta.yaml").write_text("dataset_name: plain\nedge_data:\n- file_name: edges.csv\n"
                                      "node_data:\n- file_name: nodes.csv\n")
    return folder, ids, edges


def test_csv_without_labels_or_masks_loads_for_link_prediction_only(tmp_path):
    folder, ids, _ = write_plain_csv(tmp_path / "plain")
    cfg = DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "c"))
    g = load_graph(cfg, "link_prediction")
    assert g.num_nodes() == N and g.num_edges() == 200
    assert bool(g.ndata["train_mask"].all()) and not bool(g.ndata["val_mask"].any())
    assert not bool(g.ndata["test_mask"].any()) and not bool(g.ndata["label"].any())
    from dsgraph.data.csv_dataset import user_node_ids
    assert np.array_equal(user_node_ids(g)["_N"], np.sort(ids))  # DGL numbers by sorted id
    with pytest.raises(DataError, match=r"nodes.csv: missing node column 'label' \(found "
                                        r"feat\)"):  # a node task still needs its labels
        load_graph(cfg, "node_classification")
    # a regression target's placeholder too; dataset.split (unused by links) still draws masks
    g = load_graph(DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "c"),
                                 target="regression", split=[0.5, 0.2, 0.3]), "link_prediction")
    assert g.ndata["label"].shape == (N, 1) and int(g.ndata["val_mask"].sum()) == 16


@pytest.mark.timeout(200)
def test_partition_cli_splits_a_plain_csv_and_stores_the_pairs_in_its_node_ids(tmp_path):
    folder, ids, edges = write_plain_csv(tmp_path / "plain")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
dataset: {{name: csv, path: {folder}, cache_dir: {tmp_path}/c}}
task: {{name: link_prediction}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
""")
    r = _cli(cfg, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "edge split: train 170, val 10, test 20 undirected edges" in r.stdout, r.stdout
    parts = tmp_path / "parts"
    meta = json.loads((parts / "graph.json").read_text())
    with np.load(parts / meta["link_split"]) as stored, np.load(parts / "user_node_ids.npz") as u:
        assert sorted(stored.files) == ["test", "test_ids", "train", "train_ids", "val",
                                        "val_ids"]
        user = u["_N"]
        given = set(map(tuple, edges.tolist())) | set(map(tuple, edges[:, ::-1].tolist()))
        for k in ("train", "val", "test"):
            pos, named = stored[k], stored[f"{k}_ids"]
            assert pos.shape == named.shape and (pos[:, 0] < pos[:, 1]).all()
            assert np.array_equal(named, user[pos])  # the same pairs, in the folder's ids
            assert set(map(tuple, named.tolist())) <= given  # each one an edge of edges.csv
        held = np.concatenate([stored["val_ids"], stored["test_ids"], stored["train_ids"]])
        assert len({tuple(sorted(p)) for p in held.tolist()}) == 200  # every pair, once
    from dsgraph.config import load
    from dsgraph.partition.integrity import verify_partitions
    verify_partitions(parts / "graph.json", load(cfg))  # what every trainer checks first
