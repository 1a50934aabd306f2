"""Running the ``sampled`` benchmark: partitions, emulated hosts, one fresh job per row and
repeat (dsgraph's trainer or the stock DGL example trainer), one record per row."""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import dgl

from benchmarks import jobs
from benchmarks.harness import Report
from benchmarks.sampled.report import VIEW, limit_row, stock_row
from benchmarks.sampled.settings import STOCK_TRAINER, THROTTLE, WHOLE_GRAPH, Setting, settings
from dsgraph import config as config_mod
from dsgraph.cluster.netns import LINK
from dsgraph.data import load_graph
from dsgraph.partition import partition_graph


def _partitions(base: list[str], tmp: Path) -> None:
    """Every partitioning the rows use: dsgraph's (1 and 2 parts, 2 parts with a 2-hop halo)
    and DGL's own (``partition_graph`` with METIS, trainers per machine as the rows run), and
    the whole graph in one file for the limit row."""
    g = load_graph(config_mod.load("configs/default.yaml", base).dataset)
    dgl.save_graphs(str(tmp / WHOLE_GRAPH), [g])
    partition_graph(g, 1, tmp / "p1", force=True)
    partition_graph(g, 2, tmp / "p2", force=True)
    partition_graph(g, 2, tmp / "p2h2", halo_hops=2, force=True)
    dgl.distributed.partition_graph(g, "graph", 1, str(tmp / "stock1"),
                                    num_trainers_per_machine=2, part_method="metis")
    dgl.distributed.partition_graph(g, "graph", 2, str(tmp / "stock2"),
                                    num_trainers_per_machine=1, part_method="metis")


def _stock_args(cfg) -> list[str]:
    """The stock trainer's command line for the settings of ``cfg``."""
    m, s, t = cfg.model.args, cfg.sampled, cfg.train
    return ["--fanouts", ",".join(str(f) for f in s.fanouts), "--batch-size", str(s.batch_size),
            "--epochs", str(t.epochs), "--hidden", str(m.get("hidden", 128)),
            "--num-layers", str(m.get("num_layers", 2)), "--lr", str(t.lr), "--seed", str(t.seed),
            "--eval-batch-size", str(s.eval_batch_size)]


def _run(setting: Setting, base: list[str], tmp: Path, run_name: str,
         host_sets: list[str]) -> dict:
    """One fresh job of ``setting`` in ``tmp/run_name``; its steady-state figures."""
    part_dir = tmp / setting.partition
    sets = [*base, *setting.sets, *host_sets, f"partition.num_parts={setting.parts}",
            f"partition.out_dir={part_dir}",
            f"cluster.trainers_per_machine={setting.trainers // setting.parts}"]
    cfg = config_mod.load("configs/default.yaml", sets)
    stock = setting.system == "stock"
    args = _stock_args(cfg) + (["--gloo-ifname", LINK] if cfg.cluster.netns else [])
    if setting.system == "dgl":  # evaluates sampled neighbourhoods of the test nodes only
        m = jobs.measured_limit_job(cfg, tmp / run_name, tmp / WHOLE_GRAPH, args,
                                    setting.trainers)
    else:
        m = jobs.measured_job(cfg, tmp / run_name, STOCK_TRAINER if stock else None, args,
                              part_dir / "graph.json")
    return {"samples_per_s": m.steady("samples_per_s"), "epoch_s": m.steady("epoch_s"),
            "test_acc": m.summary["test_acc"],
            "remote_feature_bytes": m.steady("remote_feature_bytes"),
            "rpc_sample_requests": m.steady("rpc_sample_requests"),
            "cache_hit_rate": m.steady("cache_hit_rate"), "wall_s": m.wall_s,
            "job_memory_mb": m.job_memory_mb, "peak_rss_mb": m.summary["peak_rss_mb"],
            "load1": m.load1}


def _row(setting: Setting, runs: list[dict]) -> dict:
    """One table row: the medians over a setting's runs, with the spread of the throughput."""
    return jobs.median_row({"setting": setting.name, "system": setting.system,
                            "hosts": setting.hosts, "parts": setting.parts,
                            "trainers": setting.trainers, "link": setting.link}, runs)


def run(quick: bool) -> Path:
    """Run every setting ``repeats`` times and write the report.

    Jobs run one at a time, repeats round-robin over the settings (every setting's first run,
    then every setting's second, ...), so a drift of the machine's speed (on this host one
    setting's repeats ranged from 19.8k to 30.3k seeds/s within one run) reaches every row
    alike instead of favouring the rows measured in a fast spell.
    """
    repeats = 1 if quick else 3
    epochs = 2 if quick else 5
    nodes = 10_000 if quick else 100_000
    report = Report(VIEW, quick, repeats=repeats)
    with tempfile.TemporaryDirectory(prefix="dsgraph-bench-") as tmpd, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmpd)
        # Half the nodes train, so an epoch is ~25 batches per trainer, not loader start-up.
        # Both systems evaluate once, after the last epoch, as DGL's example does.
        base = [f"dataset.num_nodes={nodes}", f"dataset.cache_dir={tmp / 'data'}",
                "dataset.train_frac=0.5", "dataset.val_frac=0.1", "dataset.test_frac=0.2",
                f"train.epochs={epochs}", "train.eval_every=0", "train.timeout_s=900"]
        _partitions(base, tmp)
        hosts, skipped = jobs.emulated_links(stack, THROTTLE)
        rows_run = [s for s in settings() if s.link == "local" or s.link in hosts]
        runs = jobs.round_robin(
            rows_run, lambda s: repeats, hosts, tmp, 30050,
            lambda s, i, r, host_sets: _run(s, base, tmp, f"run{i}-{r}", host_sets),
            lambda got: f"{got['samples_per_s']:,.0f} seeds/s")
    rows = {s.name: _row(s, runs[s.name]) for s in rows_run}
    lim = limit_row(rows.values())
    for row in rows.values():
        ref = stock_row(rows.values(), row["link"])
        row["ratio_vs_stock"] = row["samples_per_s"] / ref["samples_per_s"] if ref else None
        row["ratio_vs_limit"] = row["samples_per_s"] / lim["samples_per_s"] if lim else None
        report.add(row)
    report.extra["skipped"] = skipped
    return report.save()
