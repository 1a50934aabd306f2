"""Inputs of the stock DGL link-prediction peer (benchmarks/stock_dgl_link_trainer.py) for a
dsgraph link-prediction config: the same edge split, partitioned by stock DGL, and the held-out
edges with dsgraph's own evaluation negatives in the stock partitions' node ids.

Both systems then train on the same graph (validation and test edges removed, as
``python -m partition`` removes them) and rank the same positives against the same negatives,
so their MRR and Hits@K are comparable.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import dgl
import numpy as np

from dsgraph.config import Config
from dsgraph.data import load_graph
from dsgraph.data.link_split import split_edges
from dsgraph.distgraph.link_evaluate import eval_negatives, shared_negatives
from dsgraph.errors import ConfigError

TRAINER = "benchmarks.stock_dgl_link_trainer"
GRAPH_NAME = "graph"


@dataclass
class StockLinkInputs:
    """The stock partition JSON, the evaluation edges and the trainer's command line."""

    part_json: Path
    eval_npz: Path
    args: list[str]


def check_comparable(cfg: Config) -> None:
    """ConfigError unless the stock trainer can run what ``cfg`` trains (the example's
    dot-product decoder, BCE and uniform negatives; mean GraphSAGE or GCN)."""
    t, m = cfg.task, cfg.model
    wanted = {"task.name": (cfg.task_name, "link_prediction"), "task.decoder": (t.decoder, "dot"),
              "task.loss": (t.loss, "bce"),
              "task.negative_sampler": (t.negative_sampler, "uniform"),
              "train.mode": (cfg.train.mode, "sampled")}
    for key, (value, expected) in wanted.items():
        if value != expected:
            raise ConfigError(f"{cfg.source}: {key} is {value!r}; the stock DGL link trainer "
                              f"supports only {expected!r}")
    if m.name not in ("sage", "gcn"):
        raise ConfigError(f"{cfg.source}: model.name is {m.name!r}; the stock DGL link trainer "
                          f"supports 'sage' or 'gcn'")
    for key, default in (("aggregator", "mean"), ("norm", "both")):
        if m.args.get(key, default) != default:
            raise ConfigError(f"{cfg.source}: model.args.{key} is {m.args[key]!r}; the stock "
                              f"DGL link trainer supports only {default!r}")


def stock_link_args(cfg: Config, eval_npz: Path) -> list[str]:
    """The stock trainer's command line for the settings of ``cfg``."""
    m, s, t, task = cfg.model.args, cfg.sampled, cfg.train, cfg.task
    return ["--eval-edges", str(eval_npz), "--model", cfg.model.name,
            "--fanouts", ",".join(str(f) for f in s.fanouts), "--batch-size", str(s.batch_size),
            "--negatives", str(task.negatives), "--epochs", str(t.epochs),
            "--hidden", str(m.get("hidden", 128)), "--num-layers", str(m.get("num_layers", 2)),
            "--dropout", str(m.get("dropout", 0.0)), "--lr", str(t.lr), "--seed", str(t.seed),
            "--eval-batch-size", str(s.eval_batch_size), "--hits-k", str(task.hits_k),
            "--remove-edge"]


def build(cfg: Config, out_dir: Path, num_parts: Optional[int] = None,
          trainers_per_machine: int = 1) -> StockLinkInputs:
    """Split ``cfg``'s graph as dsgraph does, cut ``num_parts`` (default
    ``partition.num_parts``) METIS partitions with stock DGL into ``out_dir``, write
    ``out_dir/eval_edges.npz``; the paths and the stock trainer's arguments."""
    check_comparable(cfg)
    out_dir = Path(out_dir)
    g = load_graph(cfg.dataset)
    n, seed, task = g.num_nodes(), cfg.dataset.seed, cfg.task
    g, pairs = split_edges(g, task.edge_split, seed)
    orig_nids, _ = dgl.distributed.partition_graph(
        g, GRAPH_NAME, num_parts or cfg.partition.num_parts, str(out_dir),
        part_method="metis", return_mapping=True, num_trainers_per_machine=trainers_per_machine)
    new_of = np.empty(n, dtype=np.int64)  # original id -> stock partition id
    new_of[orig_nids.numpy()] = np.arange(n, dtype=np.int64)
    # The negatives dsgraph's evaluation draws (dsgraph/modes/sampled/links.py): split i's seed is
    # dataset.seed + i, val first; the shared Hits@K pairs use dataset.seed.
    arrays = {}
    for i, split in enumerate(("val", "test")):
        arrays[f"{split}_pos"] = new_of[pairs[split]]
        arrays[f"{split}_neg_dst"] = new_of[eval_negatives(pairs[split], n, task.eval_negatives,
                                                           seed + i)]
    arrays["hits_neg"] = new_of[shared_negatives(n, task.hits_negatives, seed)]
    eval_npz = out_dir / "eval_edges.npz"
    np.savez(eval_npz, **arrays)
    return StockLinkInputs(out_dir / f"{GRAPH_NAME}.json", eval_npz,
                           stock_link_args(cfg, eval_npz))
