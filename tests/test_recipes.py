"""The shipped recipes for a user's own data (configs/ogb_example.yaml, configs/csv_example.yaml)
load, pass the config checks with ``dataset.path`` overridden, and read a small folder of their
format, so they cannot rot."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.recipes.fixture import write_arxiv_like
from dsgraph import config
from dsgraph.data import load_graph
from tests.test_datasets_formats import toy, write_dgl_csv

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["ogb_example", "csv_example"])
def test_recipe_loads_with_a_path_override(name, tmp_path):
    cfg = config.load(ROOT / "configs" / f"{name}.yaml", [f"dataset.path={tmp_path}"])
    assert cfg.dataset.path == str(tmp_path)
    assert cfg.partition.out_dir == f"partitions/{name}"
    assert cfg.train.out_dir == f"runs/{name}"


def test_ogb_recipe_is_ogbs_arxiv_practice():
    cfg = config.load(ROOT / "configs" / "ogb_example.yaml")
    assert cfg.dataset.name == "ogb" and cfg.dataset.add_reverse_edges is True
    assert cfg.model.name == "sage"
    assert cfg.model.args == {"hidden": 256, "num_layers": 3, "aggregator": "mean",
                              "dropout": 0.5}
    assert cfg.train.lr == 0.01


def test_ogb_recipe_reads_an_arxiv_layout_folder(tmp_path):
    folder = write_arxiv_like(tmp_path / "my_folder", num_nodes=400)
    cfg = config.load(ROOT / "configs" / "ogb_example.yaml",
                      [f"dataset.path={folder}", f"dataset.cache_dir={tmp_path / 'cache'}"])
    g = load_graph(cfg.dataset, cfg.task_name)
    src, dst = (t.numpy() for t in g.edges())
    # reverse edges added: every edge is there both ways
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert all((d, s) in pairs for s, d in pairs)
    counts = [int(g.ndata[k].sum()) for k in ("train_mask", "val_mask", "test_mask")]
    assert counts == [216, 72, 112]  # the time split's 54 / 18 / 28 %
    assert g.ndata["feat"].shape == (400, 128)


def test_csv_recipe_reads_a_folder_without_masks(tmp_path):
    folder = write_dgl_csv(tmp_path / "my_graph", toy(), masks=False)
    cfg = config.load(ROOT / "configs" / "csv_example.yaml",
                      [f"dataset.path={folder}", "dataset.split=[0.8, 0.1, 0.1]",
                       f"dataset.cache_dir={tmp_path / 'cache'}"])
    g = load_graph(cfg.dataset, cfg.task_name)
    assert int(g.ndata["train_mask"].sum()) > 0
    assert not np.any(g.ndata["train_mask"].numpy() & g.ndata["test_mask"].numpy())
