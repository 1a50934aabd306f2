"""``python -m partition --config C [--out DIR] [--force] [--set ...]``: write DGL partition files."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from dsgraph import config as config_mod
from dsgraph.errors import UserError, cli_main


def summary_lines(stats: dict) -> list[str]:
    """A human-readable summary of partition_stats.json."""
    lines = [f"{stats['method']}: {stats['num_nodes']:,} nodes, {stats['num_edges']:,} edges -> "
             f"{stats['num_parts']} parts; edge cut {stats['edge_cut']:,} "
             f"({stats['edge_cut_ratio']:.3f}); node balance {stats['node_balance']:.3f}; "
             f"train balance {stats['train_balance']:.3f}; {stats['wall_s']:.1f} s, "
             f"peak RSS {stats['peak_rss_mb']:.0f} MB",
             "  part      nodes  inner_edges  halo_nodes  train_nodes"]
    for p in stats["parts"]:
        lines.append(f"  {p['part']:>4} {p['nodes']:>10,} {p['inner_edges']:>12,} "
                     f"{p['halo_nodes']:>11,} {p['train_nodes']:>12,}")
    return lines


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Load the graph named by the config, partition it and print the summary."""
    parser = argparse.ArgumentParser(prog="python -m partition", description=__doc__)
    config_mod.add_cli_args(parser)
    parser.add_argument("--out", help="output folder (default: partition.out_dir)")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    parser.add_argument("--if-missing", action="store_true",
                        help="do nothing if the output folder already holds partitions of this "
                             "dataset and partition config (rebuild them if it holds others)")
    args = parser.parse_args(argv)
    cfg = config_mod.load(args.config, args.overrides)
    out = Path(args.out or cfg.partition.out_dir)
    part_json = out / f"{cfg.partition.graph_name}.json"
    source = {"dataset": dataclasses.asdict(cfg.dataset),
              "partition": {k: v for k, v in dataclasses.asdict(cfg.partition).items()
                            if k != "out_dir"}}
    force = args.force
    if out.exists() and not force:
        stats_path = out / "partition_stats.json"
        if args.if_missing and part_json.exists() and stats_path.exists():
            stats = json.loads(stats_path.read_text())
            if stats.get("source") == source:
                print(f"partitions already in {out} (use --force to rebuild)")
                print("\n".join(summary_lines(stats)))
                return
            print(f"{out} holds partitions of another configuration; rebuilding", flush=True)
            force = True
        else:
            raise UserError(f"{out}: output folder exists; pass --force to replace it")
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    # Imported only now: torch reads OMP_NUM_THREADS when it loads, and config errors above
    # should not wait for torch and DGL to load.
    from dsgraph.data import load_graph
    from dsgraph.partition import partition_graph

    print(f"loading dataset {cfg.dataset.name} ...", flush=True)
    g = load_graph(cfg.dataset)
    p = cfg.partition
    print(f"partitioning into {p.num_parts} parts with {p.method} ...", flush=True)
    path = partition_graph(g, p.num_parts, out, p.graph_name, p.method, p.halo_hops, p.seed,
                           force=force, balance_train=p.balance_train,
                           balance_edges=p.balance_edges, extra_stats={"source": source})
    stats = json.loads((path.parent / "partition_stats.json").read_text())
    print("\n".join(summary_lines(stats)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
