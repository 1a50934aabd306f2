"""``python -m partition.chunk --config C --out DIR [--force] [--chunk-rows N] [--edge-format
parquet|csv|numpy] [--node-format numpy|parquet] [--set ...]``: write the config's graph in DGL's
chunked format."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dsgraph import config as config_mod
from dsgraph.cli import command_parser
from dsgraph.errors import ConfigError, UserError, cli_main
from dsgraph.fsutil import storage_error
from dsgraph.cli.partition import check_writable

EDGE_FORMATS = ("parquet", "csv", "numpy")
NODE_FORMATS = ("numpy", "parquet")
FILE_DATASETS = ("file", "csv", "ogb")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def check_dataset(d: config_mod.DatasetConfig) -> None:
    """ConfigError / UserError unless ``d`` is a node dataset this tool can write in chunks."""
    if d.name == "chunked":
        raise ConfigError(f"dataset.name: 'chunked' ({d.path}) is in the chunked format already; "
                          f"expected 'synthetic', 'file', 'csv' or 'ogb'")
    if d.name not in ("synthetic",) + FILE_DATASETS:
        raise ConfigError(f"dataset.name: {d.name!r} is a physics dataset; python -m "
                          f"partition.chunk writes graphs: expected 'synthetic', 'file', 'csv' "
                          f"or 'ogb'")
    if d.name == "synthetic" and d.target != "class":
        raise ConfigError(f"dataset.target: the chunked synthetic generator writes class labels "
                          f"only; expected 'class', got {d.target!r}")
    if d.name == "ogb" and d.path and Path(d.path).is_dir():
        from dsgraph.data.ogb_link import is_link_folder
        if is_link_folder(Path(d.path)):
            raise UserError(f"{d.path}: an OGB link-property folder; python -m partition.chunk "
                            f"writes node datasets (features, labels, masks)")


def refuse_foreign_folder(out: Path) -> None:
    """UserError unless ``out`` is empty or a chunked graph folder (``--force`` must never delete
    a folder of something else that merely sits at ``--out``)."""
    names = [p.name for p in out.iterdir()]
    if names and "metadata.json" not in names:
        raise UserError(f"{out}: holds {sorted(names)[0]!r} and no metadata.json: not a chunked "
                        f"graph folder; not replacing it: choose another --out")


@cli_main
def main(argv: list[str] | None = None) -> None:
    """Write the dataset named by the config as a chunked graph folder and say how to use it."""
    parser = command_parser("python -m partition.chunk", __doc__)
    parser.add_argument("--out", required=True, help="output folder (metadata.json and chunks)")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    parser.add_argument("--chunk-rows", type=positive_int, default=None,
                        help="nodes per node chunk and edges per edge chunk "
                             "(default: 524288, about 256 MiB of 128-wide float32 features)")
    parser.add_argument("--edge-format", choices=EDGE_FORMATS, default="parquet")
    parser.add_argument("--node-format", choices=NODE_FORMATS, default="numpy")
    args = parser.parse_args(argv)
    cfg = config_mod.load(args.config, args.overrides)
    d = cfg.dataset
    check_dataset(d)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UserError(f"{out}: output folder exists; pass --force to replace it")
    check_writable(out)
    if out.exists():
        refuse_foreign_folder(out)

    os.environ.setdefault("OMP_NUM_THREADS", "2")
    # Imported only now: torch reads OMP_NUM_THREADS when it loads, and bad options should not
    # wait for torch and DGL to load.
    from dsgraph.data.chunked.folder import open_chunked
    from dsgraph.data.chunked.write import write_graph_chunks
    from dsgraph.data.chunked.synthetic import DEFAULT_CHUNK_ROWS, generate_chunked

    rows = args.chunk_rows or DEFAULT_CHUNK_ROWS
    formats = {"edge_format": args.edge_format, "node_format": args.node_format}
    try:
        if d.name == "synthetic":
            print(f"generating {d.num_nodes:,} nodes x {d.feat_dim} features in chunks of "
                  f"{rows:,} rows into {out} ...", flush=True)
            meta = generate_chunked(d, out, rows, force=args.force, **formats)
        else:
            from dsgraph.data import load_graph
            from dsgraph.data.chunked.contract import InMemoryChunks
            print(f"loading dataset {d.name} ({d.path}) ...", flush=True)
            g = load_graph(d)
            print(f"writing {g.num_nodes():,} nodes, {g.num_edges():,} edges into {out} ...",
                  flush=True)
            meta = write_graph_chunks(InMemoryChunks(g, rows), out, chunk_rows=rows,
                                      force=args.force, **formats)
    except OSError as exc:  # full disk, permissions changed meanwhile: name the folder
        raise storage_error(exc, out / "metadata.json", "the chunked graph") from None
    graph = open_chunked(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {meta}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges in "
          f"{graph.num_edge_chunks} edge chunks, node data "
          f"{', '.join(k.name for k in graph.node_keys())}; {size / 2**20:,.1f} MiB")
    print(f"train on it with: --set dataset.name=chunked --set dataset.path={out}")


if __name__ == "__main__":
    main(sys.argv[1:])
