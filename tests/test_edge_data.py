"""The edge tasks' data: edge targets read from a DGL CSV folder's edge columns, an ``.npz``'s
``edge_*`` keys and a DGL file's edata, or planted in the generated graph; masks given or drawn
over the labelled edges; reverse copies in no mask; the partition files carrying each owned
edge's target in the new ids' order; every bad input one line naming the file and the key."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import dgl
import numpy as np
import pandas as pd
import pytest
import torch

from dsgraph.config import DatasetConfig, load as load_config
from dsgraph.data import load_graph
from dsgraph.data.edge_targets import planted_targets, user_edges
from dsgraph.errors import DataError

N, F, E = 60, 3, 240  # nodes, feature width, edges
MASKS = ("train_mask", "val_mask", "test_mask")


def _edges(seed: int = 0) -> dict[str, np.ndarray]:
    """A random edge list with class ids (every fifth edge unlabelled: -1) and two float
    targets per edge (the same edges unlabelled: NaN), masks over the labelled edges."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, E), rng.integers(0, N, E)
    cls = rng.integers(0, 3, E)
    cls[::5] = -1
    reg = rng.standard_normal((E, 2)).astype(np.float32)
    reg[::5] = np.nan
    slot = np.where(cls >= 0, rng.integers(0, 4, E), 3)  # 3: in no mask
    masks = {k: slot == i for i, k in enumerate(MASKS)}
    return {"src": src, "dst": dst, "class": cls, "regression": reg, **masks,
            "feat": rng.standard_normal((N, F)).astype(np.float32)}


def _cfg(name: str, path: Path, tmp: Path, **kw) -> DatasetConfig:
    return DatasetConfig(name=name, path=str(path), cache_dir=str(tmp / "cache"), **kw)


def write_csv(folder: Path, d: dict, kind: str, masks: bool = True) -> Path:
    """A DGL CSV folder of one node and edge type: node ids 10 + 3 i, the edges' targets as
    edge columns (a class id, or a quoted list of numbers; empty for unlabelled)."""
    folder.mkdir(parents=True)
    ids = 10 + 3 * np.arange(N)
    pd.DataFrame({"node_id": ids, "feat": [", ".join(f"{v:.6f}" for v in r) for r in d["feat"]]}
                 ).to_csv(folder / "nodes.csv", index=False)
    label = ([str(c) if c >= 0 else "" for c in d["class"]] if kind == "class" else
             ["" if np.isnan(r).any() else ", ".join(f"{v:.6f}" for v in r)
              for r in d["regression"]])
    edges = {"src_id": ids[d["src"]], "dst_id": ids[d["dst"]], "label": label}
    if masks:
        edges.update({k: d[k].astype(int) for k in MASKS})
    pd.DataFrame(edges).to_csv(folder / "edges.csv", index=False)
    (folder / "meta.yaml").write_text("dataset_name: toy\nedge_data:\n- file_name: edges.csv\n"
                                      "node_data:\n- file_name: nodes.csv\n")
    return folder


def _check(g: dgl.DGLGraph, d: dict, kind: str, masks_given: bool, reverse: bool) -> None:
    """``g``'s first E edges are the input's in order with their targets; masks as given (or
    drawn over the labelled edges); reverse copies copy the label, in no mask."""
    assert user_edges(g) == E and g.num_edges() == (2 * E if reverse else E)
    src, dst = (t.numpy() for t in g.edges())
    assert np.array_equal(src[:E], d["src"]) and np.array_equal(dst[:E], d["dst"])
    label = g.edata["label"].numpy()
    if kind == "class":
        assert label.dtype == np.int64 and np.array_equal(label[:E], d["class"])
        labelled = d["class"] >= 0
    else:
        assert label.dtype == np.float32 and label.shape[1] == 2
        assert np.allclose(label[:E], d["regression"], atol=1e-6, equal_nan=True)
        labelled = ~np.isnan(d["regression"]).any(1)
    if reverse:
        assert np.array_equal(src[E:], d["dst"]) and np.array_equal(label[E:], label[:E],
                                                                     equal_nan=True)
    m = {k: g.edata[k].numpy() for k in MASKS}
    assert all(not v[E:].any() for v in m.values())
    if masks_given:
        assert all(np.array_equal(m[k][:E], d[k]) for k in MASKS)
    else:  # task.edge_split (0.6, 0.2, 0.2) of the labelled edges, disjoint
        assert sum(v.astype(int) for v in m.values()).max() == 1
        assert not any((v[:E] & ~labelled).any() for v in m.values())
        assert [int(m[k].sum()) for k in MASKS] == \
            [round(0.6 * labelled.sum()), round(0.8 * labelled.sum()) - round(0.6 * labelled.sum()),
             int(labelled.sum()) - round(0.8 * labelled.sum())]


SPLIT = (0.6, 0.2, 0.2)


@pytest.mark.parametrize("kind", ["class", "regression"])
@pytest.mark.parametrize("masks", [True, False])
def test_csv_edge_columns_are_the_targets(tmp_path, kind, masks):
    d = _edges()
    folder = write_csv(tmp_path / "csv", d, kind, masks)
    task = f"edge_{'classification' if kind == 'class' else 'regression'}"
    for reverse in (False, True):
        g = load_graph(_cfg("csv", folder, tmp_path, add_reverse_edges=reverse), task, SPLIT)
        _check(g, d, kind, masks, reverse)


@pytest.mark.parametrize("kind", ["class", "regression"])
def test_npz_and_dgl_files_carry_edge_targets(tmp_path, kind):
    d = _edges(1)
    label = d[kind]
    task = f"edge_{'classification' if kind == 'class' else 'regression'}"
    np.savez(tmp_path / "g.npz", src=d["src"], dst=d["dst"], feat=d["feat"], edge_label=label,
             **{f"edge_{k}": d[k] for k in MASKS})
    _check(load_graph(_cfg("file", tmp_path / "g.npz", tmp_path), task, SPLIT), d, kind, True,
           False)
    np.savez(tmp_path / "drawn.npz", src=d["src"], dst=d["dst"], feat=d["feat"],
             edge_label=label)
    _check(load_graph(_cfg("file", tmp_path / "drawn.npz", tmp_path), task, SPLIT), d, kind,
           False, False)
    g = dgl.graph((d["src"], d["dst"]), num_nodes=N)
    g.ndata["feat"] = torch.from_numpy(d["feat"])
    g.edata["label"] = torch.from_numpy(label)
    for k in MASKS:
        g.edata[k] = torch.from_numpy(d[k])
    dgl.save_graphs(str(tmp_path / "g.dgl"), [g])
    _check(load_graph(_cfg("file", tmp_path / "g.dgl", tmp_path, add_reverse_edges=True), task,
                      SPLIT), d, kind, True, True)


@pytest.mark.parametrize("kind", ["class", "regression"])
def test_generated_graph_plants_targets_its_communities_decide(tmp_path, kind):
    cfg = DatasetConfig(num_nodes=300, avg_degree=6, num_classes=4, feat_dim=8,
                        cache_dir=str(tmp_path))
    task = f"edge_{'classification' if kind == 'class' else 'regression'}"
    g = load_graph(cfg, task, SPLIT)
    src, dst = (t.numpy() for t in g.edges())
    community = g.ndata["label"].numpy()
    label = g.edata["label"].numpy()
    n = user_edges(g)
    if kind == "class":
        assert np.array_equal(label[:n], ((community[src] + 2 * community[dst]) % 4)[:n])
    else:  # sin + cos of the communities, plus NOISE
        clean = np.sin(np.pi * community[src] / 2) + np.cos(np.pi * community[dst] / 2)
        assert (label[:n, 0] - clean[:n]).std() == pytest.approx(0.1, rel=0.2)
    assert [round(float(g.edata[k][:n].float().mean()), 2) for k in MASKS] == list(SPLIT)
    again = load_graph(cfg, task, SPLIT)  # same seed, same targets and split
    assert all(torch.equal(g.edata[k], again.edata[k]) for k in ("label",) + MASKS)
    assert planted_targets(community, 4, src, dst, kind, 0).shape[0] == g.num_edges()


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("edge_label"),
     "no edge_label: an edge task reads one class id per edge from the edges' edge_label"),
    (lambda a: a.update(edge_label=np.full(E, 1.5)),
     "edge_label: expected class ids >= 0 (-1 or NaN for unlabelled), got 1.5 at edge 0"),
    (lambda a: a.update(edge_label=np.zeros(E - 1, np.int64)),
     f"edge_label: expected {E} rows (one per edge) of class ids, got shape ({E - 1},)"),
    (lambda a: a.pop("edge_test_mask"),
     "missing edge edge_test_mask (found edge_train_mask, edge_val_mask); give all three edge "
     "masks or none (task.edge_split draws them)"),
    (lambda a: a.update(edge_val_mask=a["edge_train_mask"]),
     "is in several masks; expected each labelled edge in at most one of edge_train_mask, "
     "edge_val_mask, edge_test_mask"),
    (lambda a: a.update(edge_train_mask=np.full(E, 2)),
     "edge_train_mask: expected True/False or 0/1, got 2 at edge 0"),
    (lambda a: a.update(edge_train_mask=np.zeros(E, bool)),
     "edge_train_mask: expected at least one labelled training edge, got none"),
])
def test_bad_edge_targets_are_one_line_naming_the_file_and_key(tmp_path, change, message):
    d = _edges(2)
    arrays = {"src": d["src"], "dst": d["dst"], "feat": d["feat"], "edge_label": d["class"],
              **{f"edge_{k}": d[k] for k in MASKS}}
    change(arrays)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError) as err:
        load_graph(_cfg("file", tmp_path / "bad.npz", tmp_path), "edge_classification", SPLIT)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(tmp_path / "bad.npz")) and message in text


def test_class_ids_for_regression_edges_and_a_csv_without_labels_are_refused(tmp_path):
    d = _edges(3)
    folder = write_csv(tmp_path / "csv", d, "regression")
    pd.read_csv(folder / "edges.csv").drop(columns="label").to_csv(folder / "edges.csv",
                                                                   index=False)
    with pytest.raises(DataError, match=r"edges.csv: no label: an edge task reads one number"):
        load_graph(_cfg("csv", folder, tmp_path), "edge_regression", SPLIT)
    np.savez(tmp_path / "two.npz", src=d["src"], dst=d["dst"], feat=d["feat"],
             edge_label=d["regression"])
    with pytest.raises(DataError, match=r"edge_label: expected one class id per edge, got 2 "
                                        r"columns \(several targets: task edge_regression\)"):
        load_graph(_cfg("file", tmp_path / "two.npz", tmp_path), "edge_classification", SPLIT)


def test_partition_files_hold_each_owned_edges_target_by_new_id(tmp_path):
    """Stock ``load_partition`` reads the edge targets; each partition's rows, in its new
    edge ids' order, are the input's edges' (by ``orig_id``); reverse copies in no mask."""
    d = _edges(4)
    folder = write_csv(tmp_path / "csv", d, "class")
    cfg = tmp_path / "edge.yaml"
    cfg.write_text(f"""
dataset: {{name: csv, path: {folder}, add_reverse_edges: true, cache_dir: {tmp_path}/cache}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
task: {{name: edge_classification}}
""")
    importlib.import_module("dsgraph.cli.partition").main(["--config", str(cfg)])
    part_json = tmp_path / "parts" / f"{load_config(cfg).partition.graph_name}.json"
    meta = json.loads(part_json.read_text())
    assert meta["edge_label"] == {"num_classes": 3, "user_edges": E}
    seen = []
    for k in range(2):
        part = dgl.distributed.load_partition(str(part_json), k)
        g, efeat = part[0], part[2]
        orig = efeat["_N:_E:_N/orig_id"].numpy()
        inner = g.edata["inner_edge"].bool()
        assert len(orig) == int(inner.sum())
        assert np.array_equal(np.sort(g.edata[dgl.EID][inner].numpy()),
                              np.arange(meta["edge_map"]["_N:_E:_N"][k][0],
                                        meta["edge_map"]["_N:_E:_N"][k][1]))
        user = orig < E
        base = orig % E  # a reverse copy's label is its edge's
        assert np.array_equal(efeat["_N:_E:_N/label"].numpy(), d["class"][base])
        for key in MASKS:
            m = efeat[f"_N:_E:_N/{key}"].numpy().astype(bool)
            assert np.array_equal(m[user], d[key][orig[user]]) and not m[~user].any()
        seen.append(orig)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(2 * E))

