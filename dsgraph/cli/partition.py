"""``python -m partition --config C [--out DIR] [--force] [--set ...]``: write DGL partition files."""
from __future__ import annotations

from functools import partial
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dsgraph import config as config_mod
from dsgraph.cli import command_parser
from dsgraph.errors import ConfigError, DataError, UserError, cli_main
from dsgraph.fsutil import storage_error
from dsgraph.partition.integrity import verify_partitions
from dsgraph.partition.meta import partition_source, read_meta

if TYPE_CHECKING:  # torch and DGL load only once the config is checked (see main)
    import dgl
    import numpy as np


def summary_lines(stats: dict) -> list[str]:
    """A human-readable summary of partition_stats.json."""
    lines = [f"{stats['method']}: {stats['num_nodes']:,} nodes, {stats['num_edges']:,} edges -> "
             f"{stats['num_parts']} parts; edge cut {stats['edge_cut']:,} "
             f"({stats['edge_cut_ratio']:.3f}); node balance {stats['node_balance']:.3f}; "
             f"train balance {stats['train_balance']:.3f}; {stats['wall_s']:.1f} s, "
             f"peak RSS {stats['peak_rss_mb']:.0f} MB",
             "  part      nodes  inner_edges  halo_nodes  train_nodes"]
    if stats.get("assignment"):  # the streamed pipeline: which assigner ran, and why
        a = stats["assignment"]
        lines.insert(1, f"  assignment: {a['assigner']} ({a.get('reason', '')}), "
                        f"{a.get('wall_s', 0):.1f} s")
    for p in stats["parts"]:
        lines.append(f"  {p['part']:>4} {p['nodes']:>10,} {p['inner_edges']:>12,} "
                     f"{p['halo_nodes']:>11,} {p['train_nodes']:>12,}")
    return lines


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Load the graph named by the config, partition it and print the summary."""
    parser = command_parser("python -m partition", __doc__)
    parser.add_argument("--out", help="output folder (default: partition.out_dir)")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    parser.add_argument("--if-missing", action="store_true",
                        help="do nothing if the output folder already holds partitions of this "
                             "dataset and partition config (rebuild them if it holds others)")
    args = parser.parse_args(argv)
    cfg = config_mod.load(args.config, args.overrides)
    out = Path(args.out or cfg.partition.out_dir)
    part_json = out / f"{cfg.partition.graph_name}.json"
    force = args.force
    if out.exists() and not force and not (args.if_missing and part_json.is_file()):
        raise UserError(f"{out}: output folder exists; pass --force to replace it")
    check_writable(out)
    if out.exists() and force:
        refuse_foreign_folder(out)
    if out.exists() and not force:  # --if-missing and a partition JSON is there
        try:
            verify_partitions(part_json, cfg)
            if cfg.dataset.name == "csv" and "user_node_ids" not in read_meta(part_json):
                raise UserError(f"{part_json}: no user_node_ids.npz (the CSV's node ids "
                                f"predictions name nodes by; written by an older dsgraph)")
            stats = read_stats(out)
        except UserError as exc:
            print(f"rebuilding {out}: {exc}", flush=True)
            force = True
        else:
            print(f"partitions already in {out} (use --force to rebuild)")
            if stats is not None:
                print("\n".join(summary_lines(stats)))
            return

    os.environ.setdefault("OMP_NUM_THREADS", "2")
    # Imported only now: torch reads OMP_NUM_THREADS when it loads, and config errors and the
    # check of existing partitions above should not wait for torch and DGL to load.
    from dsgraph.data import load_graph
    from dsgraph.data.csv_dataset import user_node_ids
    from dsgraph.data.graphs import is_hetero
    from dsgraph.partition import partition_graph, partition_hetero_graph

    source = partition_source(cfg)
    p = cfg.partition
    if pipeline(cfg) == "streamed":
        from dsgraph.data.chunked.dataset import open_dataset
        from dsgraph.partition.streamed.pipeline import partition_streamed
        graph = open_dataset(cfg.dataset)
        print(f"partitioning {graph} into {p.num_parts} parts with {p.method}, streamed ...",
              flush=True)
        try:
            path = partition_streamed(graph, p, out, force=force, source=source)
        except OSError as exc:
            raise storage_error(exc, out / p.graph_name, "the partition files") from None
        _print_done(out, path)
        return
    print(f"loading dataset {cfg.dataset.name} ...", flush=True)
    g = load_graph(cfg.dataset, cfg.task_name, cfg.task.edge_split)
    user_ids = user_node_ids(g)  # read before an edge split makes another graph
    link_split = None
    if cfg.task_facts.holds_out_edges:  # they leave the graph before partitioning
        g, link_split = edge_split(g, cfg)
        if user_ids is not None:  # the pairs in the ids predictions and --pairs speak, too
            from dsgraph.data.link_split import with_user_ids
            link_split = with_user_ids(link_split, next(iter(user_ids.values())))
    print(f"partitioning into {p.num_parts} parts with {p.method} ...", flush=True)
    # a heterogeneous graph gets DGL's typed partition format (type-wise id ranges)
    write = partition_hetero_graph if is_hetero(g) else partial(partition_graph,
                                                                 link_split=link_split)
    try:
        path = write(g, p.num_parts, out, p.graph_name, p.method, p.halo_hops, p.seed,
                     force=force, balance_train=p.balance_train, balance_edges=p.balance_edges,
                     extra_stats={"source": source}, source=source, user_ids=user_ids)
    except OSError as exc:  # full disk, permissions changed meanwhile: name the folder
        raise storage_error(exc, out / p.graph_name, "the partition files") from None
    _print_done(out, path)


def pipeline(cfg: config_mod.Config) -> str:
    """``partition.pipeline`` resolved: ``auto`` streams chunked folders of one node and one edge
    type, loads the others (typed chunked folders included: a heterograph is partitioned whole)."""
    typed = False
    if cfg.dataset.name == "chunked":
        from dsgraph.data.hetero.chunked import is_hetero_chunked  # reads metadata.json only
        typed = is_hetero_chunked(cfg.dataset.path)
    if typed and cfg.partition.pipeline == "streamed":
        raise ConfigError(f"{cfg.source}: partition.pipeline: 'streamed' reads a chunked folder "
                          f"of one node type and one edge type; {cfg.dataset.path} holds several "
                          f"(a heterogeneous graph, partitioned in memory): expected 'auto' or "
                          f"'in_memory'")
    if cfg.partition.pipeline != "auto":
        return cfg.partition.pipeline
    return "streamed" if cfg.dataset.name == "chunked" and not typed else "in_memory"


def _print_done(out: Path, path: Path) -> None:
    """The summary of what was written."""
    stats = read_stats(out)
    if stats is not None:
        print("\n".join(summary_lines(stats)))
    print(f"wrote {path}")


def edge_split(g: dgl.DGLGraph, cfg: config_mod.Config
               ) -> tuple[dgl.DGLGraph, dict[str, np.ndarray]]:
    """Link prediction's graph and held-out edges: the dataset's own split where it ships one
    (``task.edge_split`` must then stay at its default), else one drawn by ``task.edge_split``."""
    from dsgraph.config import TaskConfig
    from dsgraph.data.link_split import SPLITS, apply_given_split, given_split, split_edges
    given = given_split(g)
    if given is None:
        g, arrays = split_edges(g, cfg.task.edge_split, cfg.dataset.seed)
        kind = "undirected edges"
    else:
        if list(cfg.task.edge_split) != list(TaskConfig().edge_split):
            raise DataError(f"{cfg.dataset.path}: ships its own edge split ({given.source}); "
                            f"task.edge_split {list(cfg.task.edge_split)} cannot replace it: "
                            f"remove task.edge_split")
        print(f"task.edge_split: not used; {cfg.dataset.path} ships its own edge split "
              f"({given.source})", flush=True)
        g, arrays, repeats = apply_given_split(g, given)
        kind = "directed edges" if given.directed else "undirected edges"
        if repeats:
            print(f"{repeats:,} training pairs also held out for validation or test left the "
                  f"graph (no leakage)", flush=True)
        if given.negatives:
            print("evaluation negatives given: " + ", ".join(
                f"{k} {tuple(v.shape)}" for k, v in given.negatives.items()), flush=True)
    print(f"edge split: {', '.join(f'{k} {len(arrays[k]):,}' for k in SPLITS)} {kind}; "
          f"{g.num_edges():,} directed edges left to message passing", flush=True)
    return g, arrays


def read_stats(out: Path) -> dict | None:
    """``out/partition_stats.json`` (None if absent); unreadable or cut short: a UserError."""
    path = out / "partition_stats.json"
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text())
        summary_lines(stats)  # every key the summary needs is there
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: unreadable ({type(exc).__name__}: {str(exc)[:100]})") from None
    return stats


def refuse_foreign_folder(out: Path) -> None:
    """UserError unless ``out`` is empty or holds only partition files (``--force`` must never
    delete a user's folder that merely sits where ``out_dir`` points)."""
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return
    ours = [n for n in names if n == "partition_stats.json" or re.fullmatch(r"part\d+", n)
            or n.endswith(".json") or n in ("link_split.npz", "user_node_ids.npz")
            or (n.startswith(".") and n.endswith(".tmp"))]
    foreign = [n for n in names if n not in ours]
    if foreign or "partition_stats.json" not in names:
        what = f"holds {foreign[0]!r}, which" if foreign else "has no partition_stats.json:"
        raise UserError(f"{out}: {what} python -m partition did not write; not replacing it: "
                        f"choose another --out or partition.out_dir")


def check_writable(out: Path) -> None:
    """UserError unless ``out`` (or the folder it would be made in) can be written.

    Checked before the dataset loads, so a bad ``out_dir`` costs no partitioning time.
    """
    parent = out.parent
    while not parent.exists():  # the nearest existing ancestor decides
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{out}: cannot create the output folder: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out}: cannot create the output folder: {parent} is not writable")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: output path exists and is not a folder")


if __name__ == "__main__":
    main(sys.argv[1:])
