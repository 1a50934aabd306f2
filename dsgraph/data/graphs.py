"""Graph datasets by name: a generated graph or a user's files, loaded whole as a DGLGraph;
a chunked folder opened for streaming.

A graph's ``label`` is what ``dataset.target`` says: class ids (int64), or float targets / 0/1
labels (float32, nodes x columns)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import dgl

from dsgraph.config import DatasetConfig
from dsgraph.config.tasks import TaskFacts, hetero_tasks, task_facts
from dsgraph.data.cache import cached, param_hash
from dsgraph.data.chunked.contract import GRAPH_KEYS
from dsgraph.data.csv_dataset import load_csv_dataset
from dsgraph.data.edge_targets import edge_target_arrays, planted_targets, with_edge_targets
from dsgraph.data.files import load_graph_file
from dsgraph.data.hetero.contract import (generate_hetero, is_hetero_csv, is_hetero_ogb,
                                          target_ntype)
from dsgraph.data.hetero.files import load_csv_hetero, load_ogb_hetero
from dsgraph.data.ogb import load_ogb
from dsgraph.data.ogb_link import is_link_folder, load_ogb_link
from dsgraph.data.synthetic import generate
from dsgraph.errors import ConfigError, DataError

# DatasetConfig fields that do not shape the synthetic graph (left out of its cache key).
NOT_SYNTHETIC = ("cache_dir", "path", "name", "split", "add_reverse_edges")


def load_graph(cfg: DatasetConfig, task: Optional[str] = None,
               edge_split: Sequence[float] = (0.85, 0.05, 0.1)) -> dgl.DGLGraph:
    """The DGLGraph for ``cfg`` (ndata: feat, label as ``cfg.target`` says, *_mask); it may
    carry the dataset's own edge split (:func:`dsgraph.data.link_split.given_split`) and, for
    DGL CSV folders, the user's node ids (:func:`dsgraph.data.csv_dataset.user_node_ids`; other
    formats' ids are positions). ``task``
    (``task.name``, when known) refuses a dataset that cannot serve it; an edge task's graph
    carries edge targets (:mod:`dsgraph.data.edge_targets`; ``edge_split``: ``task.edge_split``,
    drawn where the data has no edge masks)."""
    facts = task_facts(task) if task else None
    if facts is not None and facts.edge_target is not None:
        return _load_edge_task(cfg, facts, edge_split)
    if cfg.name in ("file", "csv", "ogb"):
        g = _load_file_dataset(cfg, facts)
    elif cfg.name == "chunked":
        g = _load_chunked(cfg, facts)
    elif cfg.name == "synthetic":
        g = _load_synthetic(cfg)
    elif cfg.name == "synthetic_hetero":
        g = _load_synthetic_hetero(cfg)
    else:
        raise ConfigError(f"dataset.name: {cfg.name!r} is a physics dataset; expected "
                          f"'synthetic', 'file', 'csv', 'ogb' or 'chunked' for graph training")
    ntype = target_ntype(g) if is_hetero(g) else g.ntypes[0]
    if not bool(g.nodes[ntype].data["train_mask"].any()):  # file loaders name the file instead
        raise DataError(f"dataset.train_frac: {cfg.train_frac} of {g.num_nodes(ntype)} nodes gives no "
                        f"training node; raise dataset.train_frac or dataset.num_nodes")
    return g


def _load_edge_task(cfg: DatasetConfig, facts: TaskFacts,
                    edge_split: Sequence[float]) -> dgl.DGLGraph:
    """A graph with the edge targets ``facts`` names: planted in a generated graph, or a
    user's edge columns (config.modes.EDGE_DATASETS)."""
    kind = facts.edge_target
    if cfg.name == "synthetic":
        g = _load_synthetic(cfg)
        src, dst = (t.numpy() for t in g.edges())
        label = planted_targets(g.ndata["label"].numpy(), cfg.num_classes, src, dst, kind,
                                cfg.seed)
        return with_edge_targets(g, edge_target_arrays("the generated graph", {"label": label},
                                                       len(src), kind, edge_split, cfg.seed))
    if cfg.name == "file":
        return load_graph_file(cfg.path, None, cfg.seed, cfg.add_reverse_edges is True,
                               edge_task=(kind, edge_split))
    if is_hetero_csv(cfg.path):
        raise DataError(f"{cfg.path}: task {facts.name!r} reads edge targets from a DGL CSV "
                        f"folder of one node and edge type; this folder holds several")
    return load_csv_dataset(cfg.path, cfg.cache_dir, None, cfg.seed,
                            cfg.add_reverse_edges is True, edge_task=(kind, edge_split))


def is_hetero(g: dgl.DGLGraph) -> bool:
    """Whether ``g`` has several node or edge types (the contract of
    :mod:`dsgraph.data.hetero.contract`)."""
    return len(g.ntypes) > 1 or len(g.canonical_etypes) > 1


def _load_file_dataset(cfg: DatasetConfig, facts: Optional[TaskFacts] = None) -> dgl.DGLGraph:
    """A user's dataset: ``file`` (npz / dgl.save_graphs), ``csv`` (DGL CSV folder), ``ogb``
    (node or link folder)."""
    split = cfg.split
    link = cfg.name == "ogb" and bool(cfg.path) and Path(cfg.path).is_dir()
    if link and is_link_folder(Path(cfg.path)):
        if facts is not None and not facts.holds_out_edges:
            raise DataError(f"{cfg.path}: an OGB link-property folder (edges and an edge split, no "
                            f"node labels); expected task.name link_prediction, got "
                            f"{facts.name!r}")
        return load_ogb_link(cfg.path, cfg.add_reverse_edges, split)
    if cfg.name == "ogb" and is_hetero_ogb(cfg.path):
        _node_task_only(cfg, facts)
        return load_ogb_hetero(cfg.path, cfg.add_reverse_edges, split, cfg.seed)
    if cfg.name == "csv" and is_hetero_csv(cfg.path):
        _node_task_only(cfg, facts)
        return load_csv_hetero(cfg.path, cfg.cache_dir, split, cfg.seed, cfg.add_reverse_edges)
    if cfg.name == "ogb":
        return load_ogb(cfg.path, split, cfg.seed, cfg.add_reverse_edges, cfg.target)
    reverse = cfg.add_reverse_edges is True  # "auto": the file's edges as stored
    if cfg.name == "csv":
        return load_csv_dataset(cfg.path, cfg.cache_dir, split, cfg.seed, reverse, cfg.target,
                                link=facts is not None and facts.holds_out_edges)
    return load_graph_file(cfg.path, split, cfg.seed, reverse, cfg.target)


def _load_chunked(cfg: DatasetConfig, facts: Optional[TaskFacts] = None) -> dgl.DGLGraph:
    """A chunked folder whole: a typed one (several node / edge types) as a heterograph, else
    the one-type graph checked as training reads it."""
    # pyarrow (and the chunked readers): only for chunked folders
    from dsgraph.data.hetero.chunked import is_hetero_chunked, load_chunked_hetero
    if is_hetero_chunked(cfg.path):
        _node_task_only(cfg, facts)
        return load_chunked_hetero(cfg.path, cfg.add_reverse_edges, cfg.split, cfg.seed)
    from dsgraph.data.chunked.dataset import open_dataset
    return open_dataset(cfg).to_dgl()


def _node_task_only(cfg: DatasetConfig, facts: Optional[TaskFacts]) -> None:
    """Heterogeneous graphs train the tasks whose facts say so, on their target type."""
    if facts is not None and not facts.hetero:
        raise DataError(f"{cfg.path}: a heterogeneous graph (several node and edge types); "
                        f"expected task.name {' or '.join(hetero_tasks())}, got "
                        f"{facts.name!r}")


def _load_synthetic_hetero(cfg: DatasetConfig) -> dgl.DGLGraph:
    """The generated heterogeneous graph, cached like the homogeneous one."""
    params = {k: v for k, v in vars(cfg).items() if k not in NOT_SYNTHETIC or
              k == "add_reverse_edges"}
    path = Path(cfg.cache_dir) / f"synthetic-hetero-{param_hash(params)}.dgl"

    def load(p: str):
        g = dgl.load_graphs(p)[0][0]
        data = g.nodes[target_ntype(g)].data
        for key in GRAPH_KEYS[2:]:  # dgl.save_graphs stores bool node data as uint8
            data[key] = data[key].bool()
        return g

    return cached(path, lambda: generate_hetero(cfg), lambda g, p: dgl.save_graphs(p, [g]), load)


def _load_synthetic(cfg: DatasetConfig) -> dgl.DGLGraph:
    """The generated graph, cached under ``cache_dir`` by a hash of its parameters."""
    params = {k: v for k, v in vars(cfg).items() if k not in NOT_SYNTHETIC}
    if cfg.target == "class":  # graphs cached before targets existed keep their key
        params = {k: v for k, v in params.items() if k not in ("target", "num_targets")}
    path = Path(cfg.cache_dir) / f"synthetic-{param_hash(params)}.dgl"

    def load(p: str):
        g = dgl.load_graphs(p)[0][0]
        for key in GRAPH_KEYS[2:]:  # dgl.save_graphs stores bool node data as uint8
            g.ndata[key] = g.ndata[key].bool()
        return g

    return cached(path, lambda: generate(cfg), lambda g, p: dgl.save_graphs(p, [g]), load)
