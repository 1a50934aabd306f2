"""Heterogeneous graph datasets: ogbn-mag-layout OGB folders and multi-type DGL CSV folders read
exactly as written, reverse relations, official vs drawn splits, one-line errors, and the
synthetic generator's contract, determinism and point (labels readable only through two
relations kept apart)."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dsgraph.config import DatasetConfig
from dsgraph.data.hetero.contract import (add_reverse_relations, class_factors, generate_hetero,
                                 is_hetero_csv, is_hetero_ogb, target_ntype)
from dsgraph.data.hetero.files import load_csv_hetero, load_ogb_hetero
from dsgraph.data.split import MASKS, random_split
from dsgraph.errors import DataError

COUNTS = {"author": 30, "field": 8, "institution": 5, "paper": 40}
FEAT_DIMS = {"author": 3, "paper": 4}  # field and institution are featureless
RELATIONS = [("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
             ("paper", "cites", "paper"), ("paper", "has_topic", "field")]
EDGES = {RELATIONS[0]: 35, RELATIONS[1]: 70, RELATIONS[2]: 90, RELATIONS[3]: 50}
K = 3
UNLABELLED = (2, 11, 29)  # papers with a NaN label


def toy(seed: int = 0) -> dict:
    """Typed counts, edges, features, labels (NaN for UNLABELLED) and a disjoint split."""
    rng = np.random.default_rng(seed)
    edges = {c: (rng.integers(0, COUNTS[c[0]], m), rng.integers(0, COUNTS[c[2]], m))
             for c, m in EDGES.items()}
    feat = {t: rng.standard_normal((COUNTS[t], d)).astype(np.float32)
            for t, d in FEAT_DIMS.items()}
    label = rng.integers(0, K, COUNTS["paper"]).astype(np.float64)
    label[list(UNLABELLED)] = np.nan
    perm = rng.permutation(COUNTS["paper"])
    # paper 2 (unlabelled) is listed in train: it must end up in no mask
    train = np.append(perm[:20][perm[:20] != 2], 2)
    valid, test = perm[20:28][perm[20:28] != 2], perm[28:36][perm[28:36] != 2]
    return {"edges": edges, "feat": feat, "label": label, "train": train, "valid": valid,
            "test": test}


def _csv_gz(path: Path, values, header: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = values if isinstance(values, pd.DataFrame) else pd.DataFrame(values)
    frame.to_csv(path, header=header, index=False)


def write_ogb_hetero(root: Path, data: dict, nested: bool = True) -> Path:
    """A folder in ogbn-mag's raw layout; split nested by type (as ogbn-mag) or flat."""
    raw = root / "raw"
    _csv_gz(raw / "num-node-dict.csv.gz", pd.DataFrame({t: [n] for t, n in COUNTS.items()}),
            header=True)
    _csv_gz(raw / "triplet-type-list.csv.gz", [list(c) for c in RELATIONS])
    for i, (c, (s, d)) in enumerate(data["edges"].items()):
        folder = raw / "relations" / "___".join(c)
        _csv_gz(folder / "edge.csv.gz", np.stack([s, d], 1))
        _csv_gz(folder / "num-edge-list.csv.gz", [s.size])
        _csv_gz(folder / "edge_reltype.csv.gz", np.full(s.size, i))  # ignored
    for t, f in data["feat"].items():
        _csv_gz(raw / "node-feat" / t / "node-feat.csv.gz", f)
    _csv_gz(raw / "node-label" / "paper" / "node-label.csv.gz", data["label"][:, None])
    _csv_gz(raw / "node_year" / "paper" / "node_year.csv.gz", np.full(COUNTS["paper"], 2019))
    split = root / "split" / "time" / ("paper" if nested else "")
    for name in ("train", "valid", "test"):
        _csv_gz(split / f"{name}.csv.gz", data[name])
    return root


def official_masks(data: dict) -> dict[str, np.ndarray]:
    labelled = ~np.isnan(data["label"])
    out = {}
    for key, name in zip(MASKS, ("train", "valid", "test")):
        m = np.zeros(COUNTS["paper"], bool)
        m[data[name]] = True
        out[key] = m & labelled
    return out


def check_graph(g, data: dict, reverse: bool, masks: dict | None = None) -> None:
    """Types, relations, counts and every array exactly as written."""
    assert sorted(g.ntypes) == sorted(COUNTS)
    rev = [(d, "rev-" + r, s) for s, r, d in RELATIONS] if reverse else []
    assert sorted(g.canonical_etypes) == sorted(RELATIONS + rev)
    for t, n in COUNTS.items():
        assert g.num_nodes(t) == n
    for c, (s, d) in data["edges"].items():
        u, v = (x.numpy() for x in g.edges(etype=c))
        assert np.array_equal(u, s) and np.array_equal(v, d), c
        if reverse:
            u, v = (x.numpy() for x in g.edges(etype=(c[2], "rev-" + c[1], c[0])))
            assert np.array_equal(u, d) and np.array_equal(v, s), c
    for t in COUNTS:
        keys = set(g.nodes[t].data)
        want = {"feat"} if t in FEAT_DIMS else set()
        assert keys == (want | {"label", *MASKS} if t == "paper" else want), t
    for t, f in data["feat"].items():
        assert g.nodes[t].data["feat"].dtype == torch.float32
        assert np.allclose(g.nodes[t].data["feat"].numpy(), f, atol=1e-6)
    assert target_ntype(g) == "paper"
    p = g.nodes["paper"].data
    assert p["label"].dtype == torch.int64
    expected = np.where(np.isnan(data["label"]), -1, np.nan_to_num(data["label"])).astype(int)
    assert np.array_equal(p["label"].numpy(), expected)
    for key, mask in (masks or official_masks(data)).items():
        assert p[key].dtype == torch.bool
        assert np.array_equal(p[key].numpy(), mask), key


# --- OGB ------------------------------------------------------------------------------------

@pytest.mark.parametrize("nested", [True, False])
def test_ogb_hetero_reads_exactly_what_was_written(tmp_path, nested):
    data = toy()
    root = write_ogb_hetero(tmp_path / "ogbn-mag", data, nested)
    assert is_hetero_ogb(root) and not is_hetero_ogb(tmp_path)
    check_graph(load_ogb_hetero(root), data, reverse=True)  # "auto" adds reverse relations
    check_graph(load_ogb_hetero(root, add_reverse_edges=True), data, reverse=True)
    check_graph(load_ogb_hetero(root, add_reverse_edges=False), data, reverse=False)


def test_ogb_hetero_random_split_replaces_the_official_one(tmp_path):
    data = toy()
    root = write_ogb_hetero(tmp_path / "mag", data)
    shutil.rmtree(root / "split")  # not needed when split is given
    labelled = ~np.isnan(data["label"])
    g = load_ogb_hetero(root, False, split=[0.5, 0.25, 0.25], seed=3)
    check_graph(g, data, False, random_split(COUNTS["paper"], [0.5, 0.25, 0.25], 3, labelled))
    with pytest.raises(DataError, match="no split/ folder"):
        load_ogb_hetero(root)


def _rewrite(rel: str, values):
    def change(root: Path, data: dict) -> None:
        p = root / "raw" / rel
        p.unlink()
        _csv_gz(p, values(data) if callable(values) else values)
    return change


WRITES = "relations/author___writes___paper"
OGB_ERRORS = [
    (lambda r, d: (r / "raw" / "node-feat" / "author" / "node-feat.csv.gz").unlink(),
     "raw/node-feat/author/node-feat.csv.gz: file not found"),
    (_rewrite(f"{WRITES}/edge.csv.gz",
              lambda d: np.stack([d["edges"][RELATIONS[1]][0],
                                  d["edges"][RELATIONS[1]][1] + (np.arange(70) == 6) * 40], 1)),
     f"raw/{WRITES}/edge.csv.gz: dst: 1 node ids outside [0, 40) (the number of paper nodes in "
     f"num-node-dict.csv.gz), first "),
    (_rewrite(f"{WRITES}/num-edge-list.csv.gz", [71]),
     f"raw/{WRITES}/edge.csv.gz: expected 71 edges (num-edge-list.csv.gz), got 70 rows"),
    (_rewrite(f"{WRITES}/edge.csv.gz", lambda d: np.zeros((70, 3), int)),
     f"raw/{WRITES}/edge.csv.gz: expected 2 columns (source, target node ids), got 3"),
    (lambda r, d: _csv_gz(r / "raw" / "node-label" / "author" / "node-label.csv.gz",
                          np.zeros((30, 1))),
     "raw/node-label: expected labels of one node type (the target type) in "
     "<type>/node-label.csv.gz, got ['author', 'paper']"),
    (_rewrite("node-feat/paper/node-feat.csv.gz", lambda d: d["feat"]["paper"][:-1]),
     "raw/node-feat/paper/node-feat.csv.gz: expected 40 rows (paper nodes in "
     "num-node-dict.csv.gz), got 39"),
    (_rewrite("triplet-type-list.csv.gz", [list(c) for c in RELATIONS] + [["paper", "cites",
                                                                           "field"]]),
     "raw/triplet-type-list.csv.gz: line 5: relation 'cites' is listed twice"),
    (_rewrite("triplet-type-list.csv.gz", [["paper", "cites", "venue"]]),
     "raw/triplet-type-list.csv.gz: line 1: node type 'venue' is not in num-node-dict.csv.gz"),
    (_rewrite("num-node-dict.csv.gz", [list(COUNTS), ["30", "8", "x", "40"]]),
     "raw/num-node-dict.csv.gz: expected a node count in [0, 2147483648] under 'institution', "
     "got 'x'"),
    (_rewrite("num-node-dict.csv.gz", [list(COUNTS), ["30", "8", "10" * 9, "40"]]),
     "raw/num-node-dict.csv.gz: expected a node count in [0, 2147483648] under 'institution', "
     "got '101010101010101010'"),
    (lambda r, d: (r / "split" / "time" / "paper" / "valid.csv.gz").unlink(),
     "split/time/paper/valid.csv.gz: file not found"),
    (lambda r, d: _csv_gz(r / "split" / "time" / "paper" / "test.csv.gz", [1, 45]),
     "split/time/paper/test.csv.gz: 1 paper node ids outside [0, 40), first 45 at line 2"),
]


@pytest.mark.parametrize("change, message", OGB_ERRORS)
def test_ogb_hetero_bad_inputs_are_one_line(tmp_path, change, message):
    data = toy()
    root = write_ogb_hetero(tmp_path / "ogbn-mag", data)
    change(root, data)
    with pytest.raises(DataError) as err:
        load_ogb_hetero(root)
    assert str(err.value).startswith(f"{root}/{message}"), str(err.value)
    assert "\n" not in str(err.value)


# --- DGL CSV --------------------------------------------------------------------------------

def _ids(t: str) -> np.ndarray:
    """Node ids of type t as the files name them: sparse, and node i has the i-th smallest."""
    return 1000 * (1 + sorted(COUNTS).index(t)) + 3 * np.arange(COUNTS[t])


def write_dgl_csv_hetero(folder: Path, data: dict, masks: bool = True) -> Path:
    """A multi-type DGL CSV folder; rows listed in shuffled order, an ignored edge column."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    node_data, edge_data = [], []
    for t, n in COUNTS.items():
        order = rng.permutation(n)
        cols = {"node_id": _ids(t)[order]}
        if t in data["feat"]:
            cols["feat"] = [", ".join(f"{v:.7f}" for v in row) for row in data["feat"][t][order]]
        if t == "paper":
            cols["label"] = data["label"][order]
            for key, m in (official_masks(data).items() if masks else ()):
                cols[key] = m[order]
        pd.DataFrame(cols).to_csv(folder / f"nodes_{t}.csv", index=False)
        node_data.append(f"- file_name: nodes_{t}.csv\n  ntype: {t}\n")
    for c, (s, d) in data["edges"].items():
        name = f"edges_{c[1]}.csv"
        pd.DataFrame({"src_id": _ids(c[0])[s], "dst_id": _ids(c[2])[d],
                      "weight": np.ones(s.size)}).to_csv(folder / name, index=False)
        edge_data.append(f"- file_name: {name}\n  etype: [{', '.join(c)}]\n")
    (folder / "meta.yaml").write_text("dataset_name: toyhet\nnode_data:\n" + "".join(node_data)
                                      + "edge_data:\n" + "".join(edge_data))
    return folder


def test_csv_hetero_reads_exactly_what_was_written_and_caches(tmp_path):
    data = toy()
    folder = write_dgl_csv_hetero(tmp_path / "toyhet", data)
    before = sorted(p.name for p in folder.iterdir())
    assert is_hetero_csv(folder)
    cache = tmp_path / "cache"
    check_graph(load_csv_hetero(folder, cache), data, reverse=True)
    assert sorted(p.name for p in folder.iterdir()) == before  # DGL wrote nothing there
    [entry] = list(cache.iterdir())
    assert entry.name.startswith("csv-hetero-") and [p.name for p in entry.iterdir()] == \
        ["toyhet.bin"]
    from dgl.data import CSVDataset
    calls = []
    orig = CSVDataset.process
    CSVDataset.process = lambda self: calls.append(1) or orig(self)
    try:  # the second read comes from the cache, with bool masks stored as uint8
        check_graph(load_csv_hetero(folder, cache, add_reverse_edges=False), data, False)
    finally:
        CSVDataset.process = orig
    assert calls == []


def test_csv_hetero_split_needed_without_masks_and_drawn_with_it(tmp_path):
    data = toy()
    folder = write_dgl_csv_hetero(tmp_path / "nomask", data, masks=False)
    with pytest.raises(DataError, match="nodes_paper.csv: no train_mask/val_mask/test_mask"):
        load_csv_hetero(folder, tmp_path / "c")
    labelled = ~np.isnan(data["label"])
    g = load_csv_hetero(folder, tmp_path / "c", [0.6, 0.2, 0.2], 4, False)
    check_graph(g, data, False, random_split(COUNTS["paper"], [0.6, 0.2, 0.2], 4, labelled))


def _edit(name: str, edit):
    def change(folder: Path) -> None:
        df = pd.read_csv(folder / name)
        edit(df)
        df.to_csv(folder / name, index=False)
    return change


CSV_ERRORS = [
    (_edit("nodes_author.csv", lambda df: df.insert(1, "label", 0)),
     "meta.yaml: expected a label column in the node file of one type (the target type), got "
     "2: "),
    (_edit("edges_writes.csv", lambda df: df.__setitem__("dst_id", df["dst_id"].where(
        df.index != 5, 99999))),
     "edges_writes.csv: dst_id names node id 99999 at line 7, which nodes_paper.csv (paper "
     "nodes) does not list"),
    (lambda f: (f / "edges_cites.csv").unlink(),
     "edges_cites.csv: file not found (named in meta.yaml)"),
    (_edit("nodes_field.csv", lambda df: df.insert(1, "train_mask", True)),
     "nodes_field.csv: train_mask on node type 'field', which has no label column"),
    (lambda f: (f / "meta.yaml").write_text((f / "meta.yaml").read_text().replace(
        "has_topic", "cites")),
     "meta.yaml: edge_data: relation 'cites' is listed twice"),
]


@pytest.mark.parametrize("change, message", CSV_ERRORS)
def test_csv_hetero_bad_inputs_are_one_line(tmp_path, change, message):
    folder = write_dgl_csv_hetero(tmp_path / "toyhet", toy())
    change(folder)
    with pytest.raises(DataError) as err:
        load_csv_hetero(folder, tmp_path / "c")
    assert str(err.value).startswith(f"{folder}/{message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_is_hetero_csv_only_for_several_types(tmp_path):
    (tmp_path / "meta.yaml").write_text("dataset_name: x\nnode_data:\n- file_name: n.csv\n"
                                        "edge_data:\n- file_name: e.csv\n")
    assert not is_hetero_csv(tmp_path) and not is_hetero_csv(tmp_path / "nope")


# --- the generator --------------------------------------------------------------------------

SMALL = DatasetConfig(name="synthetic", num_nodes=2000, num_classes=6, feat_dim=8,
                      avg_degree=8.0, train_frac=0.3, val_frac=0.2, test_frac=0.2, seed=0)


def _same(a, b) -> bool:
    if a.canonical_etypes != b.canonical_etypes or a.ntypes != b.ntypes:
        return False
    if any(not all(torch.equal(x, y) for x, y in zip(a.edges(etype=c), b.edges(etype=c)))
           or a.num_edges(c) != b.num_edges(c) for c in a.canonical_etypes):
        return False
    return all(a.nodes[t].data.keys() == b.nodes[t].data.keys() and all(
        torch.equal(a.nodes[t].data[k], b.nodes[t].data[k]) for k in a.nodes[t].data)
        for t in a.ntypes)


def test_generator_contract_and_reverse_relations():
    g = generate_hetero(dataclasses.replace(SMALL, add_reverse_edges=False))
    assert len(g.ntypes) >= 3 and len(g.canonical_etypes) >= 4
    assert len(set(g.etypes)) == len(g.etypes)
    assert target_ntype(g) == "paper" and g.num_nodes("paper") == 2000
    assert {t for t in g.ntypes if "feat" in g.nodes[t].data} == {"paper", "author"}
    for t in ("paper", "author"):
        feat = g.nodes[t].data["feat"]
        assert feat.dtype == torch.float32 and feat.shape == (g.num_nodes(t), 8)
    for t in ("field", "institution"):
        assert dict(g.nodes[t].data) == {}
    p = g.nodes["paper"].data
    assert p["label"].dtype == torch.int64 and set(p["label"].unique().tolist()) == set(range(6))
    masks = np.stack([p[k].numpy() for k in MASKS])
    assert masks.dtype == bool and masks.sum(0).max() == 1
    assert masks.sum(1).tolist() == [600, 400, 400]
    both = add_reverse_relations(g)
    auto = generate_hetero(SMALL)  # "auto" adds them
    assert _same(both, auto) and len(auto.canonical_etypes) == 8
    for s, r, d in g.canonical_etypes:
        u, v = auto.edges(etype=(d, "rev-" + r, s))
        x, y = g.edges(etype=(s, r, d))
        assert torch.equal(u, y) and torch.equal(v, x)
    with pytest.raises(DataError, match="the graph already has a relation 'rev-"):
        add_reverse_relations(auto)


def test_generator_is_deterministic_per_seed():
    a, b = generate_hetero(SMALL), generate_hetero(SMALL)
    assert _same(a, b)
    assert not _same(a, generate_hetero(dataclasses.replace(SMALL, seed=1)))


def _mean_over(src: np.ndarray, dst: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per destination node, the mean of its sources' rows (zeros without any)."""
    out = np.zeros((n, values.shape[1]))
    np.add.at(out, dst, values[src])
    return out / np.maximum(np.bincount(dst, minlength=n), 1)[:, None]


def _nearest_centroid(x: np.ndarray, y: np.ndarray, train: np.ndarray, classes: int
                      ) -> np.ndarray:
    centroids = np.stack([x[train & (y == c)].mean(0) for c in range(classes)])
    return ((x[:, None, :] - centroids[None]) ** 2).sum(-1).argmin(1)


def test_generator_labels_need_two_relations_kept_apart():
    k = 6
    topics, groups = class_factors(k)
    assert (topics, groups) == (3, 2)
    cfg = dataclasses.replace(SMALL, num_nodes=6000, num_classes=k, feat_dim=32, feat_signal=0.6,
                              train_frac=0.5, val_frac=0.1, test_frac=0.4,
                              add_reverse_edges=False)
    g = generate_hetero(cfg)
    n = g.num_nodes("paper")
    y = g.nodes["paper"].data["label"].numpy()
    train, test = (g.nodes["paper"].data[m].numpy() for m in ("train_mask", "test_mask"))
    acc = lambda pred: float((pred[test] == y[test]).mean())  # noqa: E731
    # the paper's own features: chance
    own = g.nodes["paper"].data["feat"].numpy()
    assert acc(_nearest_centroid(own, y, train, k)) < 1 / k + 0.1
    # has_topic: each field's topic from its training papers, a paper's by its fields' vote
    p, f = (x.numpy() for x in g.edges(etype="has_topic"))
    votes = np.zeros((g.num_nodes("field"), topics))
    keep = train[p]
    np.add.at(votes, (f[keep], y[p[keep]] // groups), 1)
    topic = _mean_over(f, p, np.eye(topics)[votes.argmax(1)], n).argmax(1)
    # writes: the group by the mean of the paper's authors' features
    a, p2 = (x.numpy() for x in g.edges(etype="writes"))
    authors = _mean_over(a, p2, g.nodes["author"].data["feat"].numpy(), n)
    group = _nearest_centroid(authors, y % groups, train, groups)
    assert acc(topic * groups + group) > 0.8  # both relations, kept apart
    # either relation alone is not enough: the other half of the label is a guess
    assert acc(topic * groups) < 0.6 and acc(0 * groups + group) < 0.4
    # type-erased mean of every in-neighbour's features (featureless fields count as zeros),
    # as a homogeneous mean aggregation sees the graph: the topic is lost
    dim = own.shape[1]
    src_feat = np.concatenate([own, g.nodes["author"].data["feat"].numpy(),
                               np.zeros((g.num_nodes("field"), dim))])
    c, c2 = (x.numpy() for x in g.edges(etype="cites"))
    offset = {"paper": 0, "author": n, "field": n + g.num_nodes("author")}
    src = np.concatenate([c, a + offset["author"], f + offset["field"]])
    dst = np.concatenate([c2, p2, p])
    mixed = _mean_over(src, dst, src_feat, n)
    assert acc(_nearest_centroid(np.hstack([own, mixed]), y, train, k)) < 0.5
