"""Datasets: synthetic DC-SBM properties, the on-disk cache, and user graph file validation."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch

from dsgraph.config import DatasetConfig
from dsgraph.data import cache as cache_mod
from dsgraph.data import load_graph
from dsgraph.data.files import load_graph_file
from dsgraph.data.synthetic import generate
from dsgraph.errors import DataError

MASKS = ("train_mask", "val_mask", "test_mask")
SMALL = DatasetConfig(num_nodes=4000, avg_degree=10.0, num_classes=5, feat_dim=16, seed=3)


def graph_arrays(g) -> dict[str, np.ndarray]:
    src, dst = g.edges()
    out = {"src": src.numpy(), "dst": dst.numpy()}
    out.update({k: v.numpy() for k, v in g.ndata.items()})
    return out


def assert_same_graph(a, b, dtypes: bool = True) -> None:
    assert a.num_nodes() == b.num_nodes() and a.num_edges() == b.num_edges()
    for x, y in zip(a.edges(), b.edges()):
        assert torch.equal(x, y)
    assert set(a.ndata.keys()) == set(b.ndata.keys())
    for k in a.ndata.keys():
        if dtypes:
            assert a.ndata[k].dtype == b.ndata[k].dtype, k
        assert torch.equal(a.ndata[k], b.ndata[k].to(a.ndata[k].dtype)), k


# --- synthetic ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_graph():
    return generate(SMALL)


def test_synthetic_deterministic_per_seed(small_graph):
    assert_same_graph(small_graph, generate(SMALL))
    other = generate(dataclasses.replace(SMALL, seed=4))
    assert not torch.equal(small_graph.ndata["label"], other.ndata["label"])
    assert small_graph.num_edges() != other.num_edges() or not torch.equal(
        small_graph.edges()[0], other.edges()[0])


def test_synthetic_sizes_dtypes_and_simple_symmetric_edges(small_graph):
    g = small_graph
    n = SMALL.num_nodes
    assert g.num_nodes() == n
    assert g.ndata["feat"].shape == (n, SMALL.feat_dim) and g.ndata["feat"].dtype == torch.float32
    assert g.ndata["label"].dtype == torch.int64
    labels = g.ndata["label"].numpy()
    assert labels.min() >= 0 and labels.max() < SMALL.num_classes
    assert len(np.unique(labels)) == SMALL.num_classes
    src, dst = (t.numpy() for t in g.edges())
    assert (src != dst).all(), "self-loops"
    key = src.astype(np.int64) * n + dst
    assert np.unique(key).size == key.size, "duplicate edges"
    rev = np.sort(dst.astype(np.int64) * n + src)
    assert np.array_equal(np.sort(key), rev), "edge set is not symmetric"
    mean_deg = g.num_edges() / n
    assert abs(mean_deg - SMALL.avg_degree) / SMALL.avg_degree < 0.1, mean_deg
    deg = g.in_degrees().numpy()
    assert deg.max() > 4 * deg.mean(), "expected a heavy-tailed degree distribution"


def test_synthetic_masks_disjoint_with_configured_fractions(small_graph):
    g = small_graph
    n = SMALL.num_nodes
    masks = [g.ndata[k] for k in MASKS]
    assert all(m.dtype == torch.bool for m in masks)
    for m, frac in zip(masks, (SMALL.train_frac, SMALL.val_frac, SMALL.test_frac)):
        assert int(m.sum()) == round(frac * n)
    assert int(torch.stack(masks).sum(0).max()) == 1, "masks overlap"


@pytest.mark.parametrize("homophily", [0.85, 0.3])
def test_synthetic_homophily_as_configured(homophily):
    cfg = dataclasses.replace(SMALL, homophily=homophily, num_nodes=3000)
    g = generate(cfg)
    labels = g.ndata["label"].numpy()
    src, dst = (t.numpy() for t in g.edges())
    same = float((labels[src] == labels[dst]).mean())
    # Inter-community endpoints are drawn from the whole graph, so they still land in the
    # source's class with probability ~1/K (uniform classes): expected h + (1 - h) / K.
    expected = homophily + (1 - homophily) / cfg.num_classes
    assert abs(same - expected) < 0.04, (same, expected)


def test_synthetic_features_carry_class_signal(small_graph):
    feat = small_graph.ndata["feat"].numpy()
    labels = small_graph.ndata["label"].numpy()
    means = np.stack([feat[labels == c].mean(0) for c in range(SMALL.num_classes)])
    # Class means differ by feat_signal * (mu_a - mu_b): far beyond the noise of a mean of ~800.
    spread = np.linalg.norm(means - means.mean(0), axis=1).mean()
    noise = np.sqrt(SMALL.feat_dim / (SMALL.num_nodes / SMALL.num_classes))
    assert spread > 3 * noise
    assert abs(feat.std() - 1.0) < 0.1  # unit noise dominates: features alone are weak


def _ridge_r2(x: np.ndarray, y: np.ndarray, train: np.ndarray) -> float:
    """R² on the other nodes of a least-squares fit of ``y`` on ``x`` (and a bias) over
    ``train``: how much of the targets a linear read-out of ``x`` explains."""
    x = np.hstack([x, np.ones((len(x), 1))])
    w = np.linalg.lstsq(x[train], y[train], rcond=None)[0]
    err = y[~train] - x[~train] @ w
    return float(1 - (err ** 2).sum() / ((y[~train] - y[~train].mean(0)) ** 2).sum())


@pytest.mark.parametrize("target", ["regression", "multilabel"])
def test_synthetic_targets_need_the_neighbours(target):
    cfg = dataclasses.replace(SMALL, target=target, num_targets=3)
    g = generate(cfg)
    y = g.ndata["label"]
    assert y.shape == (SMALL.num_nodes, 3) and y.dtype == torch.float32
    assert_same_graph(g, generate(cfg))  # deterministic
    klass = generate(SMALL)
    # the class graph's structure and masks stay as they were; the labels are replaced
    assert torch.equal(g.edges()[0], klass.edges()[0]) and torch.equal(g.edges()[1],
                                                                       klass.edges()[1])
    assert all(torch.equal(g.ndata[k], klass.ndata[k]) for k in MASKS)
    if target == "multilabel":
        assert set(np.unique(y.numpy())) == {0.0, 1.0}
        share = y.numpy().mean(0)  # from 10% to 50% of the nodes per label
        assert np.allclose(share, [0.1, 0.3, 0.5], atol=0.01), share
    # A linear read-out of a node's own features explains little; with its neighbours' mean
    # features beside them (one round of message passing) much more.
    feat = g.ndata["feat"].numpy().astype(np.float64)
    src, dst = (t.numpy() for t in g.edges())
    deg = np.maximum(np.bincount(dst, minlength=len(feat)), 1)[:, None]
    nbr = np.stack([np.bincount(dst, weights=feat[src, c], minlength=len(feat))
                    for c in range(feat.shape[1])], 1) / deg
    train = np.random.default_rng(0).random(len(feat)) < 0.5
    own = _ridge_r2(feat, y.numpy().astype(np.float64), train)
    both = _ridge_r2(np.hstack([feat, nbr]), y.numpy().astype(np.float64), train)
    assert both > own + 0.2, (own, both)


def test_synthetic_class_graph_cache_key_unchanged_by_target_settings(tmp_path):
    cfg = dataclasses.replace(SMALL, cache_dir=str(tmp_path), num_nodes=500)
    load_graph(cfg)
    load_graph(dataclasses.replace(cfg, num_targets=7))  # not read for class labels
    assert len(list(tmp_path.iterdir())) == 1
    load_graph(dataclasses.replace(cfg, target="regression"))
    assert len(list(tmp_path.iterdir())) == 2


# --- cache ----------------------------------------------------------------------------------------

def test_cache_hit_returns_equal_graph_without_regenerating(tmp_path, monkeypatch):
    cfg = dataclasses.replace(SMALL, num_nodes=500, cache_dir=str(tmp_path))
    first = load_graph(cfg)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith("synthetic-") and files[0].suffix == ".dgl"

    def boom(_cfg):
        raise AssertionError("cache miss: generate() called again")

    monkeypatch.setattr("dsgraph.data.synthetic.generate", boom)
    second = load_graph(cfg)
    assert_same_graph(first, second, dtypes=False)
    assert list(tmp_path.iterdir()) == files


def test_cache_hit_keeps_bool_masks(tmp_path):
    # dgl.save_graphs stores bool node data as uint8; a cache hit must still return bool masks
    # (uint8 tensors index as deprecated byte masks, and dtypes would differ from a cache miss).
    cfg = dataclasses.replace(SMALL, num_nodes=300, cache_dir=str(tmp_path))
    miss, hit = load_graph(cfg), load_graph(cfg)
    assert_same_graph(miss, hit)
    assert all(hit.ndata[k].dtype == torch.bool for k in MASKS)


def test_cache_key_depends_on_parameters_not_location(tmp_path):
    a = dataclasses.replace(SMALL, num_nodes=300, cache_dir=str(tmp_path / "a"))
    b = dataclasses.replace(a, cache_dir=str(tmp_path / "b"))
    c = dataclasses.replace(a, seed=9)
    load_graph(a), load_graph(b), load_graph(c)
    names_a = {p.name for p in (tmp_path / "a").iterdir()}
    names_b = {p.name for p in (tmp_path / "b").iterdir()}
    assert len(names_b) == 1 and names_b < names_a  # same parameters, same name in any folder
    assert len(names_a) == 2  # a and c (same folder, different seed) -> two files


def test_cache_write_is_atomic(tmp_path):
    target = tmp_path / "sub" / "x.dgl"
    seen = {}

    def save(obj, tmp: str) -> None:
        seen["tmp"] = Path(tmp)
        assert not target.exists(), "final path visible before the write completed"
        assert Path(tmp).parent == target.parent  # same filesystem: the rename is atomic
        Path(tmp).write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        cache_mod.cached(target, lambda: 1, save, lambda p: Path(p).read_bytes())
    assert not target.exists()
    assert list(target.parent.iterdir()) == [], "temporary file left behind"
    assert seen["tmp"] != target

    out = cache_mod.cached(target, lambda: b"data", lambda o, p: Path(p).write_bytes(o),
                           lambda p: Path(p).read_bytes())
    assert out == b"data" and target.read_bytes() == b"data"
    assert [p.name for p in target.parent.iterdir()] == ["x.dgl"]


def test_interrupted_synthetic_cache_leaves_nothing(tmp_path, monkeypatch):
    cfg = dataclasses.replace(SMALL, num_nodes=300, cache_dir=str(tmp_path))

    def half_save(path, graphs):
        Path(path).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(dgl, "save_graphs", half_save)
    with pytest.raises(KeyboardInterrupt):
        load_graph(cfg)
    assert list(tmp_path.iterdir()) == []


# --- user graph files -----------------------------------------------------------------------------

def user_arrays(n: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = 6 * n
    train = np.zeros(n, bool)
    train[: n // 2] = True
    val = np.zeros(n, bool)
    val[n // 2: 3 * n // 4] = True
    return {"src": rng.integers(0, n, m), "dst": rng.integers(0, n, m),
            "feat": rng.standard_normal((n, 7)).astype(np.float32),
            "label": rng.integers(0, 3, n), "train_mask": train, "val_mask": val,
            "test_mask": ~(train | val)}


def save_dgl(path: Path, arrays: dict[str, np.ndarray], num_nodes: int | None = None) -> Path:
    n = num_nodes if num_nodes is not None else arrays["feat"].shape[0]
    g = dgl.graph((torch.from_numpy(arrays["src"]), torch.from_numpy(arrays["dst"])), num_nodes=n)
    for k, v in arrays.items():
        if k not in ("src", "dst"):
            g.ndata[k] = torch.from_numpy(np.asarray(v))
    dgl.save_graphs(str(path), [g])
    return path


def check_loaded(g, arrays: dict[str, np.ndarray]) -> None:
    n = arrays["feat"].shape[0]
    assert g.num_nodes() == n and g.num_edges() == arrays["src"].shape[0]
    src, dst = g.edges()
    assert np.array_equal(src.numpy(), arrays["src"]) and np.array_equal(dst.numpy(), arrays["dst"])
    assert g.ndata["feat"].dtype == torch.float32
    assert np.array_equal(g.ndata["feat"].numpy(), arrays["feat"].astype(np.float32))
    assert g.ndata["label"].dtype == torch.int64
    assert np.array_equal(g.ndata["label"].numpy(), arrays["label"])
    for k in MASKS:
        assert g.ndata[k].dtype == torch.bool, k
        assert np.array_equal(g.ndata[k].numpy(), arrays[k].astype(bool)), k


def test_npz_happy_path_and_via_load_graph(tmp_path):
    arrays = user_arrays()
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    check_loaded(load_graph_file(p), arrays)
    check_loaded(load_graph(DatasetConfig(name="file", path=str(p))), arrays)


def test_npz_accepts_int32_ids_float64_features_and_01_masks(tmp_path):
    arrays = user_arrays()
    arrays["src"] = arrays["src"].astype(np.int32)
    arrays["dst"] = arrays["dst"].astype(np.uint16)
    arrays["feat"] = arrays["feat"].astype(np.float64)
    arrays["label"] = arrays["label"].astype(np.int8)
    arrays["train_mask"] = arrays["train_mask"].astype(np.int64)
    p = tmp_path / "g.npz"
    np.savez_compressed(p, **arrays)
    check_loaded(load_graph_file(str(p)), arrays)


def test_npz_isolated_trailing_nodes_count_from_feat_rows(tmp_path):
    arrays = user_arrays(n=100)
    keep = (arrays["src"] < 90) & (arrays["dst"] < 90)  # nodes 90..99 have no edges
    arrays["src"], arrays["dst"] = arrays["src"][keep], arrays["dst"][keep]
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    assert load_graph_file(p).num_nodes() == 100


@pytest.mark.parametrize("suffix", [".dgl", ".bin"])
def test_dgl_file_happy_path(tmp_path, suffix):
    arrays = user_arrays()
    p = save_dgl(tmp_path / f"g{suffix}", arrays)  # DGL stores bool masks as uint8
    check_loaded(load_graph_file(p), arrays)
    check_loaded(load_graph(DatasetConfig(name="file", path=str(p))), arrays)


def npz_case(tmp_path: Path, change) -> Path:
    arrays = user_arrays()
    change(arrays)
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    return p


def _set(key, fn):
    def change(a):
        a[key] = fn(a)
    return change


def _del(key):
    return lambda a: a.pop(key)


def _nan(a):
    a["feat"][5, 1] = np.nan
    a["feat"][9, 0] = np.inf
    a["feat"][9, 2] = -np.inf


NPZ_ERRORS = [
    (_del("label"), "missing key 'label'; an .npz graph needs keys src, dst, feat, label, "
                    "train_mask, val_mask, test_mask"),
    (_del("src"), "missing key 'src'; an .npz graph needs keys src, dst, feat, label, "
                  "train_mask, val_mask, test_mask"),
    (_del("test_mask"), "missing key 'test_mask'; an .npz graph needs keys src, dst, feat, "
                        "label, train_mask, val_mask, test_mask"),
    (_set("feat", lambda a: a["feat"][:, 0]),
     "feat: expected a 2-D array (one row per node), got shape (200,)"),
    (_set("feat", lambda a: a["feat"].astype(np.int64)),
     "feat: expected floating-point features, got dtype int64"),
    (_set("feat", lambda a: a["feat"][:0]), "feat: expected at least one node, got 0 rows"),
    (_nan, "feat: 3 NaN/inf values in 2 rows (first in row 5)"),
    (_set("label", lambda a: a["label"][:-1]),
     "label: expected a 1-D array of length 200 (one per feat row), got shape (199,)"),
    (_set("label", lambda a: a["label"][:, None]),
     "label: expected a 1-D array of length 200 (one per feat row), got shape (200, 1)"),
    (_set("label", lambda a: a["label"].astype(np.float32)),
     "label: expected integer class ids, got dtype float32"),
    (_set("label", lambda a: np.where(np.arange(200) == 17, -1, a["label"])),
     "label: expected class ids >= 0, got -1 at node 17"),
    (_set("val_mask", lambda a: a["val_mask"][:50]),
     "val_mask: expected a 1-D array of length 200 (one per feat row), got shape (50,)"),
    (_set("test_mask", lambda a: a["test_mask"].astype(np.float32)),
     "test_mask: expected a boolean (or 0/1 integer) mask, got dtype float32"),
    (_set("train_mask", lambda a: a["train_mask"].astype(np.int64) * 2),
     "train_mask: expected only 0/1 values, got values in [0, 2]"),
    (_set("train_mask", lambda a: np.zeros(200, bool)),
     "train_mask: expected at least one training node, got none"),
    (_set("src", lambda a: np.where(np.arange(a["src"].size) == 3, 200, a["src"])),
     "src: 1 node ids outside [0, 200) (the number of feat rows), first 200 at edge 3"),
    (_set("dst", lambda a: np.where(np.arange(a["dst"].size) % 100 == 7, -2, a["dst"])),
     "dst: 12 node ids outside [0, 200) (the number of feat rows), first -2 at edge 7"),
    (_set("src", lambda a: a["src"].astype(np.float64)),
     "src: expected integer node ids, got dtype float64"),
    (_set("dst", lambda a: a["dst"].reshape(2, -1)),
     "dst: expected a 1-D array of node ids, got shape (2, 600)"),
    (_set("dst", lambda a: a["dst"][:-1]), "dst: expected as many entries as src (1200), got 1199"),
]


@pytest.mark.parametrize("change, message", NPZ_ERRORS)
def test_npz_validation_errors(tmp_path, change, message):
    p = npz_case(tmp_path, change)
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value) == f"{p}: {message}"


def test_npz_object_array_is_refused_not_unpickled(tmp_path):
    arrays = user_arrays()
    arrays["label"] = np.array([object()] * 200, dtype=object)
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value) == f"{p}: label: expected a numeric array, got a pickled object array"


DGL_ERRORS = [
    (_del("feat"), "missing node data 'feat'; a DGL graph file needs ndata feat, label, "
                   "train_mask, val_mask, test_mask"),
    (_del("val_mask"), "missing node data 'val_mask'; a DGL graph file needs ndata feat, label, "
                       "train_mask, val_mask, test_mask"),
    (_set("label", lambda a: a["label"][:, None]),
     "label: expected a 1-D array of length 200 (one per feat row), got shape (200, 1)"),
    (_set("label", lambda a: a["label"].astype(np.float32)),
     "label: expected integer class ids, got dtype float32"),
    (_set("feat", lambda a: a["feat"][:, 0].copy()),
     "feat: expected a 2-D array (one row per node), got shape (200,)"),
    (_set("feat", lambda a: a["feat"].astype(np.int32)),
     "feat: expected floating-point features, got dtype int32"),
    (_nan, "feat: 3 NaN/inf values in 2 rows (first in row 5)"),
    (_set("train_mask", lambda a: a["train_mask"].astype(np.float64)),
     "train_mask: expected a boolean (or 0/1 integer) mask, got dtype float64"),
]


@pytest.mark.parametrize("change, message", DGL_ERRORS)
def test_dgl_file_validation_errors(tmp_path, change, message):
    arrays = user_arrays()
    change(arrays)
    p = save_dgl(tmp_path / "g.dgl", arrays, num_nodes=200)
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value) == f"{p}: {message}"


def test_dgl_heterograph_refused(tmp_path):
    g = dgl.heterograph({("a", "x", "b"): ([0, 1], [1, 0])})
    p = tmp_path / "h.dgl"
    dgl.save_graphs(str(p), [g])
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value) == (f"{p}: expected a homogeneous graph (one node and one edge type), "
                              f"got 2 node types and 1 edge types")


@pytest.mark.parametrize("name, content, message", [
    ("g.dgl", b"not a dgl file at all", "not a readable DGL graph file (Invalid DGL files)"),
    ("g.bin", b"", "not a readable DGL graph file (Invalid DGL files)"),
    ("g.npz", b"PK\x03\x04 broken zip", "not a readable .npz file"),
    ("g.csv", b"0,1\n", "unknown extension '.csv'; expected .npz or .dgl/.bin "
                        "(dgl.save_graphs output)"),
    ("graph", b"", "unknown extension '(none)'; expected .npz or .dgl/.bin "
                   "(dgl.save_graphs output)"),
])
def test_unreadable_or_unknown_files(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value).startswith(f"{p}: {message}")
    assert "\n" not in str(err.value)


def test_truncated_dgl_file(tmp_path):
    p = save_dgl(tmp_path / "g.dgl", user_arrays())
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(DataError, match=r"not a readable DGL graph file"):
        load_graph_file(p)


def test_missing_path_and_folder(tmp_path):
    with pytest.raises(DataError) as err:
        load_graph_file(tmp_path / "nope.npz")
    assert str(err.value) == (f"{tmp_path / 'nope.npz'}: graph file not found (expected a .dgl/.bin "
                              f"file from dgl.save_graphs, or an .npz)")
    with pytest.raises(DataError) as err:
        load_graph_file(tmp_path)
    assert str(err.value) == (f"{tmp_path}: expected the graph file (a .dgl/.bin file from "
                              f"dgl.save_graphs, or an .npz), got a folder")
    with pytest.raises(DataError, match="dataset.path: expected the graph file"):
        load_graph_file(None)


def test_dgl_file_with_several_graphs_refused(tmp_path):
    arrays = user_arrays()
    p = save_dgl(tmp_path / "g.dgl", arrays)
    g = dgl.load_graphs(str(p))[0][0]
    dgl.save_graphs(str(p), [g, g])
    with pytest.raises(DataError) as err:
        load_graph_file(p)
    assert str(err.value) == f"{p}: expected one graph in the DGL file, got 2"


def test_dgl_file_without_masks_takes_split_and_reverse_edges(tmp_path):
    arrays = user_arrays()
    for key in MASKS:
        arrays.pop(key)
    p = save_dgl(tmp_path / "g.dgl", arrays)
    with pytest.raises(DataError, match=r"no train_mask/val_mask/test_mask; set dataset.split"):
        load_graph_file(p)
    cfg = DatasetConfig(name="file", path=str(p), split=[0.5, 0.25, 0.25],
                        add_reverse_edges=True)
    g = load_graph(cfg)
    assert [int(g.ndata[k].sum()) for k in MASKS] == [100, 50, 50]
    src, dst = (t.numpy() for t in g.edges())
    assert np.array_equal(src, np.concatenate([arrays["src"], arrays["dst"]]))
    assert np.array_equal(dst, np.concatenate([arrays["dst"], arrays["src"]]))


def test_synthetic_graph_without_training_nodes_is_one_line(tmp_path):
    # The config loader refuses this too; a DatasetConfig built in code reaches the loader.
    cfg = dataclasses.replace(SMALL, num_nodes=10, train_frac=0.04, cache_dir=str(tmp_path))
    with pytest.raises(DataError) as err:
        load_graph(cfg)
    assert str(err.value) == ("dataset.train_frac: 0.04 of 10 nodes gives no training node; raise "
                              "dataset.train_frac or dataset.num_nodes")
