"""Running the ``hetero`` benchmark: the graph and its partitionings (dsgraph's, DGL's own, and
the homogeneous projection's), emulated hosts, one fresh job per row and repeat (dsgraph's
trainer or the stock DGL RGCN trainer), one record per row."""
from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import dgl
import numpy as np

from benchmarks import jobs
from benchmarks.harness import Report
from benchmarks.hetero import settings as st
from benchmarks.hetero.report import VIEW, compare
from dsgraph import config as config_mod
from dsgraph.cluster.netns import LINK
from dsgraph.data import load_graph
from dsgraph.data.hetero.contract import target_ntype
from dsgraph.partition import partition_graph, partition_hetero_graph

MASKS = ("train_mask", "val_mask", "test_mask")


def write_projection(g: dgl.DGLGraph, path: Path) -> Path:
    """``g`` as one node and one edge type, in ``dataset.name: file``'s ``.npz`` layout: nodes in
    ``dgl.to_homogeneous``'s order, features zero-padded to the widest type's plus a one-hot of
    the node type (featureless types: the one-hot only), the target type's labels and masks.

    The file loader takes class ids >= 0 only, so other types' nodes get label 0 and no mask:
    they are never seeds, never scored, and 0 is a class the target type has anyway.
    """
    target = target_ntype(g)
    counts = [g.num_nodes(t) for t in g.ntypes]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    width = max((int(g.nodes[t].data["feat"].shape[1]) for t in g.ntypes
                 if "feat" in g.nodes[t].data), default=0)
    feat = np.zeros((int(offsets[-1]), width + len(g.ntypes)), dtype=np.float32)
    for i, t in enumerate(g.ntypes):
        rows = slice(offsets[i], offsets[i + 1])
        if "feat" in g.nodes[t].data:
            f = g.nodes[t].data["feat"].numpy()
            feat[rows, :f.shape[1]] = f
        feat[rows, width + i] = 1.0
    k = g.ntypes.index(target)
    rows = slice(offsets[k], offsets[k + 1])
    label = np.zeros(int(offsets[-1]), dtype=np.int64)
    label[rows] = g.nodes[target].data["label"].numpy()
    masks = {}
    for key in MASKS:
        masks[key] = np.zeros(int(offsets[-1]), dtype=bool)
        masks[key][rows] = g.nodes[target].data[key].numpy().astype(bool)
    src, dst = (t.numpy() for t in dgl.to_homogeneous(g).edges())
    np.savez(path, src=src, dst=dst, feat=feat, label=label, **masks)
    return path


def partitions(base: list[str], tmp: Path) -> Path:
    """Every partitioning the rows use: dsgraph's of the heterograph (1 and 2 parts), of its
    homogeneous projection (2 parts), and DGL's own (METIS, 2 parts, one trainer each);
    returns the projection file."""
    hetero = config_mod.load(st.CONFIG, base)
    g = load_graph(hetero.dataset)
    npz = write_projection(g, tmp / "projection.npz")
    homo = config_mod.load(st.HOMO_CONFIG, st.homogeneous_sets(hetero, npz))
    partition_graph(load_graph(homo.dataset), 2, tmp / "h2", force=True)
    partition_hetero_graph(g, 1, tmp / "p1", force=True)
    partition_hetero_graph(g, 2, tmp / "p2", force=True)
    # last: DGL's partitioner is handed the graph itself, whatever it may attach to it
    dgl.distributed.partition_graph(g, "graph", 2, str(tmp / "stock2"),
                                    num_trainers_per_machine=1, part_method="metis")
    return npz


def _run(setting: st.Setting, base: list[str], npz: Path, tmp: Path, run_name: str,
         host_sets: list[str]) -> dict:
    """One fresh job of ``setting`` in ``tmp/run_name``; its steady-state figures."""
    part_dir = tmp / setting.partition
    sets = list(base)
    if setting.model == "sage_homogeneous":
        sets = st.homogeneous_sets(config_mod.load(st.CONFIG, base), npz)
    sets += [*setting.sets, *host_sets, f"partition.num_parts={setting.parts}",
             f"partition.out_dir={part_dir}",
             f"cluster.trainers_per_machine={setting.trainers // setting.parts}"]
    cfg = config_mod.load(setting.config, sets)
    stock = setting.system == "stock"
    args = st.stock_args(cfg) + (["--gloo-ifname", LINK] if cfg.cluster.netns else [])
    m = jobs.measured_job(cfg, tmp / run_name, st.STOCK_TRAINER if stock else None, args,
                          part_dir / "graph.json")
    return {"samples_per_s": m.steady("samples_per_s"), "epoch_s": m.steady("epoch_s"),
            "test_acc": m.summary.get("test_acc"), "job_memory_mb": m.job_memory_mb,
            "peak_rss_mb": m.summary.get("peak_rss_mb"),
            "feature_cache_mb": m.summary.get("feature_cache_mb"),
            "cache_hit_rate": m.steady("cache_hit_rate"),
            "remote_feature_bytes": m.steady("remote_feature_bytes"),
            "load1": m.load1, "wall_s": m.wall_s}


def _row(setting: st.Setting, runs: list[dict]) -> dict:
    """One table row: the medians over a setting's runs, with the spread of the throughput."""
    return jobs.median_row({"setting": setting.name, "graph": "hetero",
                            "system": setting.system, "model": setting.model,
                            "link": setting.link, "hosts": setting.hosts,
                            "parts": setting.parts, "trainers": setting.trainers}, runs)


def run(quick: bool) -> Path:
    """Run every setting ``repeats`` times and write benchmarks/reports/hetero.{json,md,png}.

    Jobs run one at a time, repeats round-robin over the settings (every setting's first run,
    then every setting's second, ...), so a drift of the machine's speed reaches every row
    alike instead of favouring the rows measured in a fast spell.
    """
    repeats, epochs = (1, 2) if quick else (st.REPEATS, st.EPOCHS)
    papers = st.QUICK_PAPERS if quick else st.PAPERS
    report = Report(VIEW, quick, repeats=repeats)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsgraph-hetero-") as tmpd, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmpd)
        base = st.base_sets(papers, epochs, tmp / "data")
        cfg = config_mod.load(st.CONFIG, base)
        report.extra["settings"] = {
            "papers": papers, "epochs": epochs, "model": cfg.model.args,
            "fanouts": list(cfg.sampled.fanouts), "batch_size": cfg.sampled.batch_size,
            "lr": cfg.train.lr, "embedding_dim": cfg.sampled.embedding_dim,
            "embedding_lr": cfg.sampled.embedding_lr, "throttle": st.THROTTLE}
        npz = partitions(base, tmp)
        hosts, skipped = jobs.emulated_links(stack, st.THROTTLE)
        rows_run = [s for s in st.settings() if s.link == "local" or s.link in hosts]
        runs = jobs.round_robin(
            rows_run, lambda s: repeats, hosts, tmp, 30250,
            lambda s, i, r, host_sets: _run(s, base, npz, tmp, f"run{i}-{r}", host_sets),
            lambda got: f"{got['samples_per_s']:,.0f} seeds/s, test_acc {got['test_acc']:.4f}")
    for row in compare([_row(s, runs[s.name]) for s in rows_run]):
        report.add(row)
    report.extra["skipped"] = skipped
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()
