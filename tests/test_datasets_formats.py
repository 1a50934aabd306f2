"""User datasets in the field's formats: OGB folders (CSV and binary layouts), DGL CSV folders,
``dataset.split`` for files without masks, the one-line error of every bad input, and partition +
SAR training through the CLI on an OGB and a CSV folder."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
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
from dsgraph.data.csv_dataset import load_csv_dataset
from dsgraph.data.files import load_graph_file
from dsgraph.data.ogb import load_ogb
from dsgraph.data.split import random_split
from dsgraph.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
MASKS = ("train_mask", "val_mask", "test_mask")
N, M, F, K = 60, 150, 4, 3  # nodes, edges (one direction), feature width, classes
UNLABELLED = (3, 17, 42)  # nodes whose OGB / CSV label is NaN


def toy(seed: int = 0) -> dict[str, np.ndarray]:
    """A small graph: edges, features, labels (NaN for UNLABELLED), a disjoint split."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, M), rng.integers(0, N, M)
    feat = rng.standard_normal((N, F)).astype(np.float32)
    label = rng.integers(0, K, N).astype(np.float64)
    label[list(UNLABELLED)] = np.nan
    perm = rng.permutation(N)
    # The official split lists node 3 (unlabelled) in train: it must end in no mask.
    train, valid, test = perm[:30], perm[30:42], perm[42:54]
    if 3 not in train:
        train = np.append(train[train != 3], 3)
        valid, test = valid[valid != 3], test[test != 3]
    return {"src": src, "dst": dst, "feat": feat, "label": label, "train": train,
            "valid": valid, "test": test}


def _csv_gz(path: Path, values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(values).to_csv(path, header=False, index=False)


def write_ogb(root: Path, data: dict, binary: bool = False, split: bool = True) -> Path:
    """An OGB node-property folder as the ogb package lays it out (CSV or binary raw layout)."""
    raw = root / "raw"
    raw.mkdir(parents=True)
    if binary:
        np.savez_compressed(raw / "data.npz", edge_index=np.stack([data["src"], data["dst"]]),
                            num_nodes_list=np.array([N]), num_edges_list=np.array([M]),
                            node_feat=data["feat"])
        np.savez_compressed(raw / "node-label.npz", node_label=data["label"][:, None])
    else:
        _csv_gz(raw / "edge.csv.gz", np.stack([data["src"], data["dst"]], 1))
        _csv_gz(raw / "num-node-list.csv.gz", [N])
        _csv_gz(raw / "num-edge-list.csv.gz", [M])
        _csv_gz(raw / "node-feat.csv.gz", data["feat"])
        _csv_gz(raw / "node-label.csv.gz", data["label"][:, None])
    if split:
        for name in ("train", "valid", "test"):
            _csv_gz(root / "split" / "time" / f"{name}.csv.gz", data[name])
    (root / "RELEASE_v1.txt").write_text("")
    return root


def write_dgl_csv(folder: Path, data: dict, masks: bool = True) -> Path:
    """A DGL CSV dataset folder; node ids are 100 + 7 * i, listed in shuffled order."""
    folder.mkdir(parents=True)
    order = np.random.default_rng(1).permutation(N)
    ids = 100 + 7 * np.arange(N)
    nodes = {"node_id": ids[order],
             "feat": [", ".join(f"{v:.6f}" for v in row) for row in data["feat"][order]],
             "label": data["label"][order]}
    if masks:
        for key, name in zip(MASKS, ("train", "valid", "test")):
            m = np.zeros(N, bool)
            m[data[name]] = True
            nodes[key] = m[order]
    pd.DataFrame(nodes).to_csv(folder / "nodes.csv", index=False)
    pd.DataFrame({"src_id": ids[data["src"]], "dst_id": ids[data["dst"]]}).to_csv(
        folder / "edges.csv", index=False)
    (folder / "meta.yaml").write_text("dataset_name: toy\nedge_data:\n- file_name: edges.csv\n"
                                      "node_data:\n- file_name: nodes.csv\n")
    return folder


def official_masks(data: dict) -> dict[str, np.ndarray]:
    labelled = ~np.isnan(data["label"])
    out = {}
    for key, name in zip(MASKS, ("train", "valid", "test")):
        m = np.zeros(N, bool)
        m[data[name]] = True
        out[key] = m & labelled
    return out


def check_graph(g, data: dict, reverse: bool) -> None:
    src, dst = (t.numpy() for t in g.edges())
    assert g.num_nodes() == N
    if reverse:
        assert g.num_edges() == 2 * M
        assert np.array_equal(src, np.concatenate([data["src"], data["dst"]]))
        assert np.array_equal(dst, np.concatenate([data["dst"], data["src"]]))
    else:
        assert g.num_edges() == M
        assert np.array_equal(src, data["src"]) and np.array_equal(dst, data["dst"])
    assert g.ndata["feat"].dtype == torch.float32
    assert np.allclose(g.ndata["feat"].numpy(), data["feat"], atol=1e-6)
    label = g.ndata["label"].numpy()
    assert g.ndata["label"].dtype == torch.int64
    expected = np.where(np.isnan(data["label"]), -1, np.nan_to_num(data["label"])).astype(int)
    assert np.array_equal(label, expected)
    for key, mask in official_masks(data).items():
        assert g.ndata[key].dtype == torch.bool
        assert np.array_equal(g.ndata[key].numpy(), mask), key
    covered = sum(g.ndata[k].numpy().astype(int) for k in MASKS)
    assert covered[list(UNLABELLED)].sum() == 0  # unlabelled nodes are in no mask


# --- OGB ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("binary", [False, True])
def test_ogb_layouts_counts_labels_official_split(tmp_path, binary):
    data = toy()
    arxiv = write_ogb(tmp_path / "ogbn_arxiv", data, binary)  # OGB: no inverse edges
    check_graph(load_ogb(arxiv), data, reverse=False)
    products = write_ogb(tmp_path / "ogbn-products", data, binary)  # OGB: add inverse edges
    g = load_graph(DatasetConfig(name="ogb", path=str(products)))
    check_graph(g, data, reverse=True)
    # the setting overrides the dataset's convention
    check_graph(load_ogb(products, add_reverse_edges=False), data, reverse=False)
    check_graph(load_ogb(arxiv, add_reverse_edges=True), data, reverse=True)


def test_ogb_unknown_name_needs_the_reverse_edge_setting(tmp_path):
    data = toy()
    root = write_ogb(tmp_path / "mygraph", data)
    with pytest.raises(DataError) as err:
        load_ogb(root)
    assert str(err.value).startswith(f"{root}: not a known OGB dataset name")
    assert "dataset.add_reverse_edges" in str(err.value)
    check_graph(load_ogb(root, add_reverse_edges=False), data, reverse=False)


def test_ogb_split_replaces_official_and_is_needed_without_one(tmp_path):
    data = toy()
    root = write_ogb(tmp_path / "ogbn-arxiv", data, split=False)
    with pytest.raises(DataError) as err:
        load_ogb(root)
    assert str(err.value) == (f"{root}: no split/ folder (the official split); set "
                              f"dataset.split: [train, val, test] fractions to draw one")
    g = load_ogb(root, split=[0.5, 0.2, 0.3], seed=1)
    labelled = N - len(UNLABELLED)
    masks = {k: g.ndata[k].numpy() for k in MASKS}
    assert [int(m.sum()) for m in masks.values()] == [round(0.5 * labelled),
                                                      round(0.7 * labelled) - round(0.5 * labelled),
                                                      labelled - round(0.7 * labelled)]
    assert sum(m.astype(int) for m in masks.values()).max() == 1
    assert not any(m[list(UNLABELLED)].any() for m in masks.values())
    again = load_ogb(root, split=[0.5, 0.2, 0.3], seed=1)
    other = load_ogb(root, split=[0.5, 0.2, 0.3], seed=2)
    assert all(torch.equal(again.ndata[k], g.ndata[k]) for k in MASKS)
    assert not torch.equal(other.ndata["train_mask"], g.ndata["train_mask"])
    # with an official split present, dataset.split still decides
    with_split = write_ogb(tmp_path / "x" / "ogbn-arxiv", data)
    g2 = load_ogb(with_split, split=[0.5, 0.2, 0.3], seed=1)
    assert all(torch.equal(g2.ndata[k], g.ndata[k]) for k in MASKS)


def _rewrite(p: Path, values) -> None:
    p.unlink()
    _csv_gz(p, values)


def _raw(name: str, values):
    return lambda r, d: _rewrite(r / "raw" / name, values(d) if callable(values) else values)


def _split_file(name: str, values):
    return lambda r, d: _rewrite(r / "split" / "time" / name,
                                 values(d) if callable(values) else values)


def _pickled_split(r: Path, d: dict) -> None:
    (r / "split" / "time" / "test.csv.gz").unlink()
    (r / "split" / "time" / "split_dict.pt").write_bytes(b"not read")


# (what breaks the folder, the start of the message relative to the folder)
OGB_ERRORS = [
    (lambda r, d: (r / "raw" / "node-feat.csv.gz").unlink(),
     "raw/node-feat.csv.gz: file not found (and no edge-feat.csv.gz or node_species.csv.gz to "
     "derive node features from)"),
    (lambda r, d: shutil.rmtree(r / "raw"), "raw: folder not found; an OGB dataset folder holds "
                                            "raw/"),
    (_raw("node-feat.csv.gz", lambda d: d["feat"][:-2]),
     f"raw/node-feat.csv.gz: expected {N} rows (num-node-list.csv.gz), got {N - 2}"),
    (_raw("node-feat.csv.gz", lambda d: np.where(np.arange(N)[:, None] == 5, np.inf, d["feat"])),
     f"raw/node-feat.csv.gz: feat: {F} NaN/inf values in 1 rows (first in row 5)"),
    (_raw("node-feat.csv.gz", [["a", "b"]] * N),
     "raw/node-feat.csv.gz: not a readable CSV of node features ("),
    (_raw("node-label.csv.gz", lambda d: np.where(np.arange(N) == 8, -2, d["label"])[:, None]),
     "raw/node-label.csv.gz: label: expected class ids (integers >= 0, NaN for unlabelled), got "
     "-2.0 at node 8"),
    (_raw("node-label.csv.gz", lambda d: np.where(np.arange(N) == 9, 1.5, d["label"])[:, None]),
     "raw/node-label.csv.gz: label: expected class ids (integers >= 0, NaN for unlabelled), got "
     "1.5 at node 9"),
    (_raw("node-label.csv.gz", np.zeros((N, 3))),
     "raw/node-label.csv.gz: label: expected one label column (N x 1), got 3 columns "
     "(several columns: set dataset.target to multilabel or regression)"),
    (_raw("node-label.csv.gz", np.zeros((N - 1, 1))),
     f"raw/node-label.csv.gz: expected {N} rows (one label per node), got {N - 1}"),
    (_raw("edge.csv.gz", lambda d: np.stack([d["src"], d["dst"] + (np.arange(M) == 4) * N], 1)),
     f"raw/edge.csv.gz: dst: 1 node ids outside [0, {N}) (the number of feat rows), first "),
    (_raw("edge.csv.gz", lambda d: np.stack([d["src"], d["dst"], d["dst"]], 1)),
     "raw/edge.csv.gz: expected 2 columns (source, target node ids), got 3"),
    (_raw("num-edge-list.csv.gz", [M + 1]),
     f"raw/edge.csv.gz: expected {M + 1} edges (num-edge-list.csv.gz), got {M} rows"),
    (_raw("num-node-list.csv.gz", [N, 5]),
     "raw/num-node-list.csv.gz: expected one graph (a node-property dataset), got 2 entries"),
    (_split_file("valid.csv.gz", [1, N + 3]),
     f"split/time/valid.csv.gz: 1 node ids outside [0, {N}), first {N + 3} at line 2"),
    (_split_file("test.csv.gz", lambda d: d["train"][:2]),
     "split/time/test.csv.gz: 2 node ids also in "),
    (_split_file("train.csv.gz", [3]),  # only an unlabelled node
     "split/time/train.csv.gz: train_mask: expected at least one labelled training node, got "
     "none from the file's train_mask"),
    (lambda r, d: (r / "split" / "time" / "valid.csv.gz").unlink(),
     "split/time/valid.csv.gz: file not found"),
    (_pickled_split, "split/time/split_dict.pt: a pickled split, which dsgraph does not unpickle"),
    (lambda r, d: [(r / "split" / "time").rename(r / "split" / "a"), (r / "split" / "b").mkdir()],
     "split: expected one split folder, got ['a', 'b']"),
    (lambda r, d: (r / "raw" / "num-node-dict.csv.gz").write_bytes(b""),
     "raw/num-node-dict.csv.gz: a heterogeneous OGB dataset"),
    (lambda r, d: (r / "raw" / "edge.csv.gz").write_bytes(b"\x1f\x8b garbage"),
     "raw/edge.csv.gz: not a readable CSV of edges"),
]


@pytest.mark.parametrize("change, message", OGB_ERRORS)
def test_ogb_bad_inputs_are_one_line(tmp_path, change, message):
    data = toy()
    root = write_ogb(tmp_path / "ogbn-arxiv", data)
    change(root, data)
    with pytest.raises(DataError) as err:
        load_ogb(root)
    assert str(err.value).startswith(f"{root}/{message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_ogb_picks_the_datasets_own_split_folder(tmp_path):
    data = toy()
    root = write_ogb(tmp_path / "ogbn-arxiv", data)
    (root / "split" / "other").mkdir()
    check_graph(load_ogb(root), data, reverse=False)


def test_ogb_binary_labels_and_pickles(tmp_path):
    data = toy()
    root = write_ogb(tmp_path / "ogbn-arxiv", data, binary=True)
    np.savez(root / "raw" / "node-label.npz", node_label=np.array([object()] * N))
    with pytest.raises(DataError) as err:
        load_ogb(root)
    assert str(err.value) == (f"{root}/raw/node-label.npz: node_label: expected a numeric "
                              f"array, got a pickled object array")
    np.savez(root / "raw" / "data.npz", edge_index=np.zeros((3, M), int))
    with pytest.raises(DataError) as err:
        load_ogb(root)
    assert str(err.value) == (f"{root}/raw/data.npz: missing key 'num_nodes_list'; expected "
                              f"keys edge_index, num_nodes_list, num_edges_list")


# --- labels beyond class ids: ogbn-proteins' layout, float and multi-column labels ---------------

L = 5  # labels per node of the multi-label fixtures
SPECIES = np.array([3702, 9606, 511145])  # taxonomy ids, as ogbn-proteins stores species


def write_proteins(root: Path, data: dict, binary: bool = False) -> dict:
    """An ogbn-proteins-like folder: no node features but 3-wide edge features and a species
    per node, L 0/1 labels per node (no NaN), the official split under split/species/."""
    rng = np.random.default_rng(7)
    extra = {"edge_feat": rng.random((M, 3)).astype(np.float32),
             "species": SPECIES[rng.integers(0, 3, N)],
             "labels": (rng.random((N, L)) < 0.3).astype(np.int64)}
    raw = root / "raw"
    raw.mkdir(parents=True)
    if binary:
        np.savez_compressed(raw / "data.npz", edge_index=np.stack([data["src"], data["dst"]]),
                            num_nodes_list=np.array([N]), num_edges_list=np.array([M]),
                            edge_feat=extra["edge_feat"], node_species=extra["species"][:, None])
        np.savez_compressed(raw / "node-label.npz", node_label=extra["labels"])
    else:
        _csv_gz(raw / "edge.csv.gz", np.stack([data["src"], data["dst"]], 1))
        _csv_gz(raw / "num-node-list.csv.gz", [N])
        _csv_gz(raw / "num-edge-list.csv.gz", [M])
        _csv_gz(raw / "edge-feat.csv.gz", extra["edge_feat"])
        _csv_gz(raw / "node_species.csv.gz", extra["species"][:, None])
        _csv_gz(raw / "node-label.csv.gz", extra["labels"])
    for name in ("train", "valid", "test"):
        _csv_gz(root / "split" / "species" / f"{name}.csv.gz", data[name])
    return extra


@pytest.mark.parametrize("binary", [False, True])
def test_ogb_proteins_layout_loads_as_multilabel(tmp_path, binary):
    data = toy()
    root = tmp_path / "ogbn_proteins"
    extra = write_proteins(root, data, binary)
    g = load_graph(DatasetConfig(name="ogb", path=str(root), target="multilabel"))
    src, dst = data["src"], data["dst"]
    assert g.num_edges() == 2 * M  # ogbn-proteins: inverse edges added
    # features: the mean of each node's incoming edge features (both directions), species
    into = np.concatenate([dst, src])
    ef = np.concatenate([extra["edge_feat"], extra["edge_feat"]])
    mean = np.stack([np.bincount(into, ef[:, c], N) for c in range(3)], 1) / \
        np.maximum(np.bincount(into, minlength=N), 1)[:, None]
    onehot = (extra["species"][:, None] == np.sort(SPECIES)[None, :]).astype(np.float32)
    assert np.allclose(g.ndata["feat"].numpy(), np.hstack([mean, onehot]), atol=1e-6)
    assert g.ndata["label"].dtype == torch.float32
    assert np.array_equal(g.ndata["label"].numpy(), extra["labels"])
    for key, name in zip(MASKS, ("train", "valid", "test")):  # every node labelled
        assert np.array_equal(np.flatnonzero(g.ndata[key].numpy()), np.sort(data[name])), key
    # read as class ids, the 5 columns are refused with one line saying what to set
    with pytest.raises(DataError) as err:
        load_ogb(root)
    assert str(err.value).endswith(f"label: expected one label column (N x 1), got {L} columns "
                                   f"(several columns: set dataset.target to multilabel or "
                                   f"regression)")


def test_ogb_multilabel_values_and_missing_features_are_one_line(tmp_path):
    data = toy()
    root = tmp_path / "ogbn-proteins"
    extra = write_proteins(root, data)
    labels = extra["labels"].copy()
    labels[7, 2] = 2
    _rewrite(root / "raw" / "node-label.csv.gz", labels)
    with pytest.raises(DataError) as err:
        load_ogb(root, target="multilabel")
    assert str(err.value) == (f"{root}/raw/node-label.csv.gz: label: expected 0 or 1 (NaN for "
                              f"unlabelled), got 2.0 at node 7, column 2")
    (root / "raw" / "edge-feat.csv.gz").unlink()
    (root / "raw" / "node_species.csv.gz").unlink()
    with pytest.raises(DataError) as err:
        load_ogb(root, target="multilabel")
    assert str(err.value) == (f"{root}/raw/node-feat.csv.gz: file not found (and no "
                              f"edge-feat.csv.gz or node_species.csv.gz to derive node features "
                              f"from)")


def test_csv_and_npz_carry_float_and_multi_column_labels(tmp_path):
    data = toy()
    rng = np.random.default_rng(3)
    targets = rng.normal(size=(N, 2))
    # DGL CSV: a quoted list per row (two targets); an empty cell: an unlabelled node
    folder = write_dgl_csv(tmp_path / "reg", data)
    df = pd.read_csv(folder / "nodes.csv")
    order = (df["node_id"].to_numpy() - 100) // 7
    df["label"] = [", ".join(f"{v:.9f}" for v in targets[i]) for i in order]
    df.loc[np.flatnonzero(order == 11), "label"] = ""
    df.to_csv(folder / "nodes.csv", index=False)
    g = load_csv_dataset(folder, tmp_path / "c", target="regression")
    label = g.ndata["label"].numpy()
    assert g.ndata["label"].dtype == torch.float32 and label.shape == (N, 2)
    assert np.isnan(label[11]).all() and not any(g.ndata[k][11] for k in MASKS)
    keep = np.arange(N) != 11
    assert np.allclose(label[keep], targets[keep], atol=1e-6)
    # one numeric column: one target per node
    df["label"] = [targets[i, 0] for i in order]
    df.to_csv(folder / "nodes.csv", index=False)
    g = load_csv_dataset(folder, tmp_path / "c", target="regression")
    assert g.ndata["label"].shape == (N, 1)
    assert np.allclose(g.ndata["label"].numpy()[:, 0], targets[:, 0], atol=1e-6)
    # .npz: 2-D float labels, every node labelled
    arrays = {"src": data["src"], "dst": data["dst"], "feat": data["feat"],
              "label": (targets > 0).astype(np.float64)}
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    g = load_graph_file(p, split=[0.5, 0.2, 0.3], target="multilabel")
    assert np.array_equal(g.ndata["label"].numpy(), targets > 0)
    arrays["label"] = targets.copy()
    arrays["label"][4, 1] = np.nan
    np.savez(p, **arrays)
    with pytest.raises(DataError) as err:
        load_graph_file(p, split=[0.5, 0.2, 0.3], target="regression")
    assert str(err.value) == f"{p}: label: expected a value in every row, got NaN at node 4"


@pytest.mark.parametrize("target", ["class", "regression"])
def test_partition_files_carry_float_labels_and_their_width(tmp_path, target):
    from dsgraph.data.synthetic import generate
    from dsgraph.partition import load_local_partition, read_meta, write_partitions

    g = generate(DatasetConfig(num_nodes=300, num_classes=3, feat_dim=4, target=target,
                               num_targets=3))
    path = write_partitions(g, np.arange(300) % 2, tmp_path / "parts", "graph")
    meta = read_meta(path)
    width = {"class": "num_classes", "regression": "num_targets"}[target]
    assert meta[width] == 3 and ({"num_classes", "num_targets"} - {width}).isdisjoint(meta)
    for rank in (0, 1):
        part = load_local_partition(path, rank, 2)
        label = part.ndata["label"]
        assert label.dtype == g.ndata["label"].dtype
        assert torch.equal(label, g.ndata["label"][part.ndata["orig_id"]])


def test_ogb_missing_folder(tmp_path):
    with pytest.raises(DataError) as err:
        load_graph(DatasetConfig(name="ogb", path=str(tmp_path / "nope")))
    assert str(err.value) == (f"{tmp_path / 'nope'}: OGB dataset folder not found (expected the "
                              f"folder holding raw/ and split/)")


# --- DGL CSV ------------------------------------------------------------------------------------

def test_csv_folder_read_with_dgl_cached_outside_the_users_folder(tmp_path):
    data = toy()
    folder = write_dgl_csv(tmp_path / "toy", data)
    before = sorted(p.name for p in folder.iterdir())
    cache = tmp_path / "cache"
    cfg = DatasetConfig(name="csv", path=str(folder), cache_dir=str(cache))
    g = load_graph(cfg)
    check_graph(g, data, reverse=False)  # node i is the i-th smallest node_id
    assert sorted(p.name for p in folder.iterdir()) == before  # DGL wrote nothing there
    entries = list(cache.iterdir())
    assert len(entries) == 1 and entries[0].name.startswith("csv-")
    assert [p.name for p in entries[0].iterdir()] == ["toy.bin"]
    # a second read comes from the cache and gives the same graph
    from dgl.data import CSVDataset
    calls = []
    orig = CSVDataset.process
    CSVDataset.process = lambda self: calls.append(1) or orig(self)
    try:
        again = load_graph(cfg)
        assert calls == []
        check_graph(again, data, reverse=False)
        # an edited file is parsed again (the cache is keyed by the files' contents)
        data2 = toy(seed=5)
        shutil.rmtree(folder)
        write_dgl_csv(folder, data2)
        check_graph(load_graph(cfg), data2, reverse=False)
        assert calls == [1] and len(list(cache.iterdir())) == 2
    finally:
        CSVDataset.process = orig
    # an unwritable cache location costs only the parse
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    check_graph(load_csv_dataset(folder, blocker / "sub", reverse_edges=False), data2, False)


def test_csv_reverse_edges_and_split(tmp_path):
    data = toy()
    folder = write_dgl_csv(tmp_path / "nomask", data, masks=False)
    with pytest.raises(DataError) as err:
        load_csv_dataset(folder, tmp_path / "c")
    assert str(err.value) == (f"{folder}/nodes.csv: no train_mask/val_mask/test_mask; set "
                              f"dataset.split: [train, val, test] fractions (e.g. [0.8, 0.1, "
                              f"0.1]) to draw them")
    g = load_graph(DatasetConfig(name="csv", path=str(folder), cache_dir=str(tmp_path / "c"),
                                 split=[0.6, 0.2, 0.2], seed=4, add_reverse_edges=True))
    assert g.num_edges() == 2 * M
    labelled = ~np.isin(np.arange(N), UNLABELLED)
    expected = random_split(N, [0.6, 0.2, 0.2], 4, eligible=labelled)
    for k in MASKS:
        assert np.array_equal(g.ndata[k].numpy(), expected[k]), k
    # with masks in the file, dataset.split replaces them
    masked = write_dgl_csv(tmp_path / "masked", data)
    g2 = load_csv_dataset(masked, tmp_path / "c", split=[0.6, 0.2, 0.2], seed=4)
    assert all(np.array_equal(g2.ndata[k].numpy(), expected[k]) for k in MASKS)


def _edit_nodes(column: str, value, row: int | None = None):
    """A change of nodes.csv: set ``column`` (at file row ``row``, or everywhere) to ``value``."""
    def change(folder: Path) -> None:
        df = pd.read_csv(folder / "nodes.csv")
        if row is None:
            df[column] = value
        else:
            df[column] = df[column].astype(object)
            df.loc[row, column] = value
        df.to_csv(folder / "nodes.csv", index=False)
    return change


def _drop_column(column: str):
    def change(folder: Path) -> None:
        df = pd.read_csv(folder / "nodes.csv")
        df.pop(column)
        df.to_csv(folder / "nodes.csv", index=False)
    return change


def _write(name: str, text: str):
    return lambda folder: (folder / name).write_text(text)


HETERO_META = ("dataset_name: t\nedge_data:\n- file_name: edges.csv\n- file_name: edges.csv\n"
               "  etype: [_V, other, _V]\nnode_data:\n- file_name: nodes.csv\n")

# (what breaks the folder, the start of the message relative to the folder)
CSV_ERRORS = [
    (lambda f: (f / "meta.yaml").unlink(), "meta.yaml: file not found"),
    (lambda f: (f / "edges.csv").unlink(), "edges.csv: file not found (named in meta.yaml)"),
    (_write("meta.yaml", HETERO_META),
     "meta.yaml: edge_data: expected one edge type (a homogeneous graph), got 2; heterogeneous "
     "graphs are not supported"),
    (_write("meta.yaml", "- a\n"),
     "meta.yaml: expected a mapping (dataset_name, node_data, edge_data), got list"),
    (_write("meta.yaml", "dataset_name: t\nnode_data: []\n"),
     "meta.yaml: missing key 'edge_data'; expected dataset_name, node_data and edge_data"),
    (_drop_column("feat"),
     "nodes.csv: missing node column 'feat' (found label, test_mask, train_mask, val_mask)"),
    (_edit_nodes("train_mask", False),
     "nodes.csv: train_mask: expected at least one training node, got none"),
    (_edit_nodes("label", 2.5, row=4),
     "nodes.csv: label: expected class ids (integers >= 0, NaN for unlabelled), got 2.5 at "
     "node"),
    (_edit_nodes("feat", "1, nan, 2, 3", row=4), "nodes.csv: feat: 1 NaN/inf values in 1 rows"),
    (_edit_nodes("feat", "1, 2", row=4),
     f"nodes.csv: feat: expected {F} values per row (as on line 2), got 2 at line 6"),
    (_edit_nodes("feat", "1, two, 3, 4", row=0),
     "nodes.csv: feat: expected numbers (a quoted, comma-separated list), got '1, two, 3, 4' at "
     "line 2"),
    (_write("edges.csv", "src_id,dst_id\n100,5\n107,100\n"),
     "edges.csv: an edge names node id 5, which nodes.csv does not list"),
    (_write("edges.csv", "src,dst\n100,107\n"), ": not a readable DGL CSV dataset (Missing src "
                                                  "id field [src_id] in file [edges.csv].)"),
]


@pytest.mark.parametrize("change, message", CSV_ERRORS)
def test_csv_bad_inputs_are_one_line(tmp_path, change, message):
    folder = write_dgl_csv(tmp_path / "toy", toy())
    change(folder)
    with pytest.raises(DataError) as err:
        load_csv_dataset(folder, tmp_path / "cache")
    sep = "" if message.startswith(":") else "/"
    assert str(err.value).startswith(f"{folder}{sep}{message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_csv_extra_text_columns_are_ignored_and_two_graphs_refused(tmp_path):
    data = toy()
    folder = write_dgl_csv(tmp_path / "toy", data)
    df = pd.read_csv(folder / "nodes.csv")
    df["title"] = "a paper, with commas"
    df.to_csv(folder / "nodes.csv", index=False)
    check_graph(load_csv_dataset(folder, tmp_path / "cache"), data, reverse=False)
    df["graph_id"] = (df["node_id"] - 100) // 7 % 2
    df.to_csv(folder / "nodes.csv", index=False)
    ids = 100 + 7 * np.arange(N)
    pd.DataFrame({"graph_id": [0, 1], "src_id": [ids[0], ids[1]], "dst_id": [ids[2], ids[3]]}
                 ).to_csv(folder / "edges.csv", index=False)
    (folder / "graphs.csv").write_text("graph_id\n0\n1\n")
    with open(folder / "meta.yaml", "a") as fh:
        fh.write("graph_data:\n  file_name: graphs.csv\n")
    with pytest.raises(DataError) as err:
        load_csv_dataset(folder, tmp_path / "cache")
    assert str(err.value) == (f"{folder}/meta.yaml: expected one graph, got 2 (several graph "
                              f"ids); dsgraph trains on one graph")


# --- npz without masks, split fractions -----------------------------------------------------------

def test_npz_without_masks_needs_split_and_split_is_seeded(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"src": rng.integers(0, 200, 800), "dst": rng.integers(0, 200, 800),
              "feat": rng.standard_normal((200, 5)).astype(np.float32),
              "label": rng.integers(0, 4, 200)}
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value) == (f"{p}: no train_mask/val_mask/test_mask; set dataset.split: "
                              f"[train, val, test] fractions (e.g. [0.8, 0.1, 0.1]) to draw them")
    cfg = DatasetConfig(name="file", path=str(p), split=[0.7, 0.1, 0.2], seed=3)
    g = load_graph(cfg)
    counts = [int(g.ndata[k].sum()) for k in MASKS]
    assert counts == [140, 20, 40]
    assert int(sum(g.ndata[k].int() for k in MASKS).max()) == 1
    assert all(torch.equal(load_graph(cfg).ndata[k], g.ndata[k]) for k in MASKS)
    other = load_graph(dataclasses.replace(cfg, seed=4))
    assert not torch.equal(other.ndata["train_mask"], g.ndata["train_mask"])
    # partial fractions: nodes outside every mask stay out
    g = load_graph(dataclasses.replace(cfg, split=[0.25, 0.0, 0.25]))
    assert [int(g.ndata[k].sum()) for k in MASKS] == [50, 0, 50]
    # a split too small for one training node
    with pytest.raises(DataError) as err:
        load_graph(dataclasses.replace(cfg, split=[0.001, 0.0, 0.5]))
    assert str(err.value) == (f"{p}: train_mask: expected at least one labelled training node, "
                              f"got none from dataset.split [0.001, 0.0, 0.5] of 200 labelled "
                              f"nodes")
    # masks in the file + split: the split wins
    masked = tmp_path / "m.npz"
    np.savez(masked, **arrays, train_mask=np.ones(200, bool), val_mask=np.zeros(200, bool),
             test_mask=np.zeros(200, bool))
    assert load_graph_file(masked).ndata["train_mask"].all()
    g = load_graph_file(masked, split=[0.7, 0.1, 0.2], seed=3)
    assert [int(g.ndata[k].sum()) for k in MASKS] == [140, 20, 40]
    # some masks but not all, without split
    np.savez(masked, **arrays, train_mask=np.ones(200, bool))
    with pytest.raises(DataError, match=r"missing key 'val_mask'"):
        load_graph_file(masked)


def test_random_split_fractions_are_exact_and_disjoint():
    masks = random_split(1000, [0.333, 0.333, 0.334], seed=0)
    assert [int(m.sum()) for m in masks.values()] == [333, 333, 334]
    assert sum(m.astype(int) for m in masks.values()).min() == 1  # every node, once
    eligible = np.arange(1000) % 4 != 0
    masks = random_split(1000, [0.5, 0.5, 0.0], seed=0, eligible=eligible)
    assert not any(m[~eligible].any() for m in masks.values())
    assert [int(m.sum()) for m in masks.values()] == [375, 375, 0]


# --- CLI end to end: partition + SAR training on an OGB and a CSV folder ------------------------

def _cli(module: str, cfg: Path, cwd: Path) -> subprocess.CompletedProcess:
    return preload.run_command([sys.executable, "-m", module, "--config", str(cfg)],
                               {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                               str(cwd), timeout=200)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["ogb", "csv"])
def test_partition_and_sar_training_through_the_cli(tmp_path, fmt):
    data = toy()
    if fmt == "ogb":
        path = write_ogb(tmp_path / "ogbn-products", data, binary=False)
    else:
        path = write_dgl_csv(tmp_path / "toy", data)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
dataset: {{name: {fmt}, path: {path}, cache_dir: {tmp_path}/data}}
partition: {{num_parts: 2, out_dir: {tmp_path}/parts}}
model: {{name: sage, args: {{hidden: 8}}}}
train: {{mode: sar, epochs: 2, out_dir: {tmp_path}/run, timeout_s: 150}}
""")
    r = _cli("partition", cfg, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    stats = json.loads((tmp_path / "parts" / "partition_stats.json").read_text())
    assert stats["num_nodes"] == N
    assert stats["num_edges"] == (2 * M if fmt == "ogb" else M)  # ogbn-products: inverse edges
    r = _cli("train", cfg, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["num_workers"] == 2 and summary["epochs"] == 2
    assert summary["test_acc"] is not None and 0.0 <= summary["test_acc"] <= 1.0
    # a finished run keeps its best-validation model and draws its curves
    run = tmp_path / "run"
    assert summary["best_epoch"] in (1, 2) and (run / "best.pt").is_file()
    assert (run / "curves.png").stat().st_size > 0
    (run / "curves.png").unlink()
    r = subprocess.run([sys.executable, "-m", "train", "--plot", str(run)], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and (run / "curves.png").is_file(), r.stderr[-2000:]
