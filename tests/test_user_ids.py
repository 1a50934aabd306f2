"""The user's node ids: DGL CSV loaders attach the ``node_id`` values (integers only), the
partitioner stores them in ``user_node_ids.npz`` (checksummed), predict maps original ids
through them; positional formats (OGB, ``.npz``, typed chunked folders, generated graphs) carry
none, so predictions keep positions. End to end: tests/dist/test_predict_user_ids.py."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dsgraph.config import DatasetConfig
from dsgraph.data import load_graph
from dsgraph.data.csv_dataset import user_node_ids
from dsgraph.errors import DataError, UserError
from dsgraph.partition import partition_graph
from dsgraph.partition.format import USER_IDS_FILE, read_user_ids
from dsgraph.partition.integrity import verify_files
from dsgraph.partition.meta import read_meta
from dsgraph.predict.output import with_user_ids
from dsgraph.predict.pairs import read_pairs
from tests import test_datasets_formats as homo
from tests import test_hetero_data as het
from tests.dist.test_predict_user_ids import scramble_ids


def _csv(folder: Path, cache: Path, **kw):
    return load_graph(DatasetConfig(name="csv", path=str(folder), cache_dir=str(cache), **kw))


def test_csv_loaders_attach_the_node_ids_in_dgls_numbering(tmp_path):
    data = homo.toy()
    folder = homo.write_dgl_csv(tmp_path / "toy", data)
    ids = scramble_ids(folder)["_V"]
    nodes = pd.read_csv(folder / "nodes.csv")
    for _ in range(2):  # parsed, then from the cache
        g = _csv(folder, tmp_path / "c")
        got = user_node_ids(g)["_N"]
        assert got.dtype == np.int64 and np.array_equal(got, ids) and got[0] == -7
        # node i is the row whose node_id is ids[i]: its features
        row = nodes.set_index("node_id").loc[ids, "feat"]
        feat = np.array([[float(v) for v in r.split(",")] for r in row], dtype=np.float32)
        assert np.allclose(g.ndata["feat"].numpy(), feat, atol=1e-5)
    folder = het.write_dgl_csv_hetero(tmp_path / "het", het.toy())
    ids = scramble_ids(folder, seed=2)
    g = _csv(folder, tmp_path / "c")
    assert {t: v.tolist() for t, v in user_node_ids(g).items()} == \
        {t: v.tolist() for t, v in ids.items()}


@pytest.mark.parametrize("cell", ["2.5", "", "text"])
def test_non_integer_node_ids_are_one_line(tmp_path, cell):
    folder = homo.write_dgl_csv(tmp_path / "toy", homo.toy())
    df, edges = (pd.read_csv(folder / f) for f in ("nodes.csv", "edges.csv"))
    line, shown = 6, cell
    if cell == "text":  # every id text, edges too: DGL reads it, predictions cannot
        df["node_id"] = "n" + df["node_id"].astype(str)
        for col in ("src_id", "dst_id"):
            edges[col] = "n" + edges[col].astype(str)
        line, shown = 2, df["node_id"].iloc[0]
    else:  # one row's id (edges naming it dropped: DGL would refuse them first)
        old = df["node_id"].iloc[4]
        df["node_id"] = df["node_id"].astype(object)
        df.loc[4, "node_id"] = cell
        edges = edges[(edges["src_id"] != old) & (edges["dst_id"] != old)]
    df.to_csv(folder / "nodes.csv", index=False)
    edges.to_csv(folder / "edges.csv", index=False)
    with pytest.raises(DataError) as err:
        _csv(folder, tmp_path / "c")
    assert str(err.value) == (f"{folder}/nodes.csv: node_id: expected integer node ids, got "
                              f"{shown!r} at line {line}")


def test_integral_float_ids_are_ids_and_duplicates_are_refused(tmp_path):
    folder = homo.write_dgl_csv(tmp_path / "toy", homo.toy())
    df = pd.read_csv(folder / "nodes.csv")
    df["node_id"] = df["node_id"].astype(float)
    df.to_csv(folder / "nodes.csv", index=False)
    assert user_node_ids(_csv(folder, tmp_path / "c"))["_N"].tolist() == \
        (100 + 7 * np.arange(homo.N)).tolist()
    df.loc[3, "node_id"] = df.loc[5, "node_id"]
    df.to_csv(folder / "nodes.csv", index=False)
    with pytest.raises(DataError, match="not a readable DGL CSV dataset .*duplicate") as err:
        _csv(folder, tmp_path / "c")
    assert "\n" not in str(err.value)


def test_positional_formats_carry_no_ids_and_write_no_sidecar(tmp_path):
    data = homo.toy()
    p = tmp_path / "g.npz"
    np.savez(p, src=data["src"], dst=data["dst"], feat=data["feat"],
             label=np.nan_to_num(data["label"]).astype(np.int64),
             **homo.official_masks(data))
    ogb = homo.write_ogb(tmp_path / "ogbn-products", data)
    mag = het.write_ogb_hetero(tmp_path / "mag", het.toy())
    graphs = {"npz": load_graph(DatasetConfig(name="file", path=str(p))),
              "ogb": load_graph(DatasetConfig(name="ogb", path=str(ogb))),
              "mag": load_graph(DatasetConfig(name="ogb", path=str(mag))),
              "synthetic": load_graph(DatasetConfig(num_nodes=300, cache_dir=str(tmp_path)))}
    for name, g in graphs.items():
        assert user_node_ids(g) is None, name
    path = partition_graph(graphs["npz"], 2, tmp_path / "parts", method="random")
    assert read_user_ids(path) is None and not (tmp_path / "parts" / USER_IDS_FILE).exists()
    arrays = {"node_id": np.arange(4), "pred": np.array([1, 0, 1, 1])}
    assert with_user_ids(arrays, None) is arrays  # predictions keep positions


def test_typed_chunked_folders_are_positional(tmp_path):
    from tests.test_chunked_hetero import hetero, write_hetero_chunked
    folder = write_hetero_chunked(hetero(), tmp_path / "mag", 2).parent
    g = load_graph(DatasetConfig(name="chunked", path=str(folder), split=[0.5, 0.2, 0.2]),
                   "node_classification")
    assert user_node_ids(g) is None


def test_sidecar_is_listed_checksummed_and_verified(tmp_path):
    folder = homo.write_dgl_csv(tmp_path / "toy", homo.toy())
    ids = scramble_ids(folder)["_V"]
    g = _csv(folder, tmp_path / "c")
    path = partition_graph(g, 2, tmp_path / "parts", method="random", user_ids=user_node_ids(g))
    meta = read_meta(path)
    assert meta["user_node_ids"] == USER_IDS_FILE and USER_IDS_FILE in meta["dsgraph"]["files"]
    assert np.array_equal(read_user_ids(path), ids)
    verify_files(path, meta)
    side = tmp_path / "parts" / USER_IDS_FILE
    with np.load(side) as z:
        assert z.files == ["_N"]
        swapped = z["_N"][::-1].copy()
    np.savez(side, _N=swapped)  # same size, other ids
    with pytest.raises(DataError, match=f"{side}: sha256 differs"):
        read_user_ids(path)
    side.unlink()
    with pytest.raises(DataError, match=f"{side}: file missing"):
        read_user_ids(path)


def test_predict_maps_original_ids_and_pairs(tmp_path):
    ids = np.array([-7, 3, 42, 1000], dtype=np.int64)
    arrays = {"node_id": np.array([0, 1, 2, 3]), "prob": np.eye(4)[:, :2]}
    out = with_user_ids(arrays, ids)
    assert out["node_id"].tolist() == [-7, 3, 42, 1000]
    assert np.array_equal(out["prob"], arrays["prob"])
    unsorted = with_user_ids(arrays, np.array([5, 1, 9, 0]))  # re-sorted by node_id
    assert unsorted["node_id"].tolist() == [0, 1, 5, 9]
    assert unsorted["prob"].tolist() == arrays["prob"][[3, 1, 0, 2]].tolist()
    pairs = tmp_path / "pairs.csv"
    pd.DataFrame({"src": [1000, -7], "dst": [3, 42]}).to_csv(pairs, index=False)
    assert read_pairs(pairs, 4, ids).tolist() == [[3, 1], [0, 2]]
    scored = with_user_ids({"src": np.array([3, 0]), "dst": np.array([1, 2]),
                            "score": np.zeros(2)}, ids)
    assert scored["src"].tolist() == [1000, -7] and scored["dst"].tolist() == [3, 42]
    pd.DataFrame({"src": [1000], "dst": [2]}).to_csv(pairs, index=False)
    with pytest.raises(UserError) as err:
        read_pairs(pairs, 4, ids)
    assert str(err.value) == (f"--pairs {pairs}: row 2: dst 2 is not a node id of the dataset "
                              f"(its node_id values)")


def test_partition_cli_writes_a_link_csv_folders_ids_and_force_replaces_them(tmp_path):
    from tests.test_link_data import N, _pairs, write_csv
    folder = write_csv(tmp_path / "toy", _pairs())
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
dataset: {{name: csv, path: {folder}, cache_dir: {tmp_path}/data}}
task: {{name: link_prediction}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
train: {{mode: sampled}}
""")
    main = importlib.import_module("dsgraph.cli.partition").main
    for extra in ([], ["--force"]):  # --force: the sidecar is a file partition wrote
        main(["--config", str(cfg), *extra])
    meta = json.loads((tmp_path / "parts" / "graph.json").read_text())
    assert {"link_split.npz", USER_IDS_FILE} <= set(meta["dsgraph"]["files"])
    assert read_user_ids(tmp_path / "parts" / "graph.json").tolist() == \
        (10 + np.arange(N)).tolist()


def test_if_missing_rebuilds_csv_partitions_without_the_sidecar(tmp_path, capsys):
    from dsgraph import config as config_mod
    from dsgraph.partition.meta import partition_source
    folder = homo.write_dgl_csv(tmp_path / "toy", homo.toy())
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(f"""
dataset: {{name: csv, path: {folder}, cache_dir: {tmp_path}/data}}
partition: {{num_parts: 2, method: random, out_dir: {tmp_path}/parts}}
train: {{mode: sar}}
""")
    cfg = config_mod.load(str(cfg_path), [])
    # as an older dsgraph wrote them: the same files, no user_node_ids.npz
    partition_graph(load_graph(cfg.dataset), 2, tmp_path / "parts", method="random",
                    source=partition_source(cfg))
    main = importlib.import_module("dsgraph.cli.partition").main
    main(["--config", str(cfg_path), "--if-missing"])
    assert "rebuilding" in capsys.readouterr().out
    assert read_user_ids(tmp_path / "parts" / "graph.json").tolist() == \
        (100 + 7 * np.arange(homo.N)).tolist()
    main(["--config", str(cfg_path), "--if-missing"])  # now they are complete: kept
    assert "partitions already in" in capsys.readouterr().out
