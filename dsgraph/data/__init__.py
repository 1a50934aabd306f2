"""Datasets: synthetic community graphs, user graph files, and physics fields (Darcy, airfoil)."""
from __future__ import annotations

from pathlib import Path

import dgl

from dsgraph.config import DatasetConfig
from dsgraph.data.cache import cached, param_hash
from dsgraph.data.files import load_graph_file
from dsgraph.data.synthetic import generate
from dsgraph.errors import ConfigError

GRAPH_KEYS = ("feat", "label", "train_mask", "val_mask", "test_mask")


def load_graph(cfg: DatasetConfig):
    """The node-classification DGLGraph for ``cfg`` (ndata: feat, label, *_mask)."""
    if cfg.name == "file":
        return load_graph_file(cfg.path)
    if cfg.name != "synthetic":
        raise ConfigError(f"dataset.name: {cfg.name!r} is a physics dataset; expected "
                          f"'synthetic' or 'file' for graph training")

    params = {k: v for k, v in vars(cfg).items() if k not in ("cache_dir", "path", "name")}
    path = Path(cfg.cache_dir) / f"synthetic-{param_hash(params)}.dgl"

    def load(p: str):
        g = dgl.load_graphs(p)[0][0]
        for key in GRAPH_KEYS[2:]:  # dgl.save_graphs stores bool node data as uint8
            g.ndata[key] = g.ndata[key].bool()
        return g

    return cached(path, lambda: generate(cfg), lambda g, p: dgl.save_graphs(p, [g]), load)
