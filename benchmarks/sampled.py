"""Benchmark ``sampled``: dsgraph's sampled trainer vs stock DistDGL on equal deployments.

The stock rows run ``benchmarks.stock_dgl_trainer`` (DGL's distributed GraphSAGE example logic,
no dsgraph code) on DGL's own partitioning, served by unpatched DistGraph servers; the dsgraph
rows run ``python -m train``'s sampled trainer on dsgraph's partitions. Same graph, model,
fanouts, batch size, learning rate and epochs everywhere; a fresh job per repeat.

Deployments (``link``):
- ``local``: one host. Stock DGL can only serve one partition per host (dmlc/dgl#3621), so its
  row is 1 partition x 2 trainers; dsgraph runs 2 partitions x 1 trainer (the target), and also
  stock's layout.
- ``veth``: 2 emulated hosts (network namespaces on a veth pair, each with its own /dev/shm:
  :mod:`dsgraph.cluster.netns`), one partition and one trainer per host, both systems.
- ``veth_throttled``: the same over a link throttled to 1 Gbit/s (``tc`` token bucket).
Rows needing namespaces are skipped, with the reason in the report, where they cannot be made.

dsgraph rows: its defaults (halo and remote feature cache, DGL's distributed sampler), the tuned
``local sampling`` (2-hop halo partitions, own seeds, every layer sampled in the trainer), and
single options turned off or on (``no remote cache``: only the halo cached; ``prefetch 2``;
``own rows not copied``: the partition's rows read from shared memory and merged with the cache's).

Samples/s = training seeds per second summed over trainers (seeds / slowest trainer's loop),
median over epochs 2.. of a run, then median over repeats (with the spread of the repeats).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import dgl

from benchmarks.harness import Report, View, bars, median, render_saved
from dsgraph import config as config_mod
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.cluster.netns import LINK, HostsUnavailable, emulated_hosts
from dsgraph.data import load_graph
from dsgraph.metrics import read_records
from dsgraph.partition import partition_graph
from dsgraph.runs import prepare_run_dir
from train.__main__ import launch

THROTTLE = "1gbit"
STOCK_TRAINER = "benchmarks.stock_dgl_trainer"
# The tuned rows: every frontier sampled in the trainer's partition (2-hop halo, own seeds).
LOCAL_SAMPLING = ("sampled.local_sampling=true", "partition.halo_hops=2",
                  "sampled.seed_split=owned")
NO_REMOTE_CACHE = ("sampled.remote_cache_mb=0",)  # halo rows cached, the rest pulled per batch
PREFETCH = ("sampled.prefetch=2",)
NO_TABLE = ("sampled.copy_own_features=false",)  # own rows read from shared memory, then merged


@dataclass(frozen=True)
class Setting:
    """One row: which system, how deployed, and its extra config overrides."""

    name: str
    system: str  # "stock" or "dsgraph"
    hosts: int
    parts: int
    trainers: int  # in all
    link: str  # "local", "veth" or "veth_throttled"
    sets: tuple[str, ...] = ()
    partition: str = ""  # which partitioning (a folder under the temp dir)


def _settings() -> list[Setting]:
    local = "local"
    rows = [
        Setting("stock DGL 1 part x 2 trainers", "stock", 1, 1, 2, local, partition="stock1"),
        Setting("dsgraph 2 parts x 1 trainer", "dsgraph", 1, 2, 2, local, partition="p2"),
        Setting("dsgraph 2 parts x 1 trainer, local sampling", "dsgraph", 1, 2, 2, local,
                LOCAL_SAMPLING, partition="p2h2"),
        Setting("dsgraph 2 parts x 1 trainer, no remote cache", "dsgraph", 1, 2, 2, local,
                NO_REMOTE_CACHE, partition="p2"),
        Setting("dsgraph 2 parts x 1 trainer, prefetch 2", "dsgraph", 1, 2, 2, local,
                PREFETCH, partition="p2"),
        Setting("dsgraph 2 parts x 1 trainer, own rows not copied", "dsgraph", 1, 2, 2, local,
                NO_TABLE, partition="p2"),
        Setting("dsgraph 1 part x 2 trainers", "dsgraph", 1, 1, 2, local, partition="p1"),
    ]
    for link in ("veth", "veth_throttled"):
        rows += [
            Setting(f"stock DGL 2 hosts ({link})", "stock", 2, 2, 2, link, partition="stock2"),
            Setting(f"dsgraph 2 hosts ({link})", "dsgraph", 2, 2, 2, link, partition="p2"),
            Setting(f"dsgraph 2 hosts ({link}), local sampling", "dsgraph", 2, 2, 2, link,
                    LOCAL_SAMPLING, partition="p2h2"),
            Setting(f"dsgraph 2 hosts ({link}), no remote cache", "dsgraph", 2, 2, 2, link,
                    NO_REMOTE_CACHE, partition="p2"),
        ]
    return rows


def _partitions(base: list[str], tmp: Path) -> None:
    """Every partitioning the rows use: dsgraph's (1 and 2 parts, 2 parts with a 2-hop halo)
    and DGL's own (``partition_graph`` with METIS, trainers per machine as the rows run)."""
    g = load_graph(config_mod.load("configs/default.yaml", base).dataset)
    partition_graph(g, 1, tmp / "p1", force=True)
    partition_graph(g, 2, tmp / "p2", force=True)
    partition_graph(g, 2, tmp / "p2h2", halo_hops=2, force=True)
    dgl.distributed.partition_graph(g, "graph", 1, str(tmp / "stock1"),
                                    num_trainers_per_machine=2, part_method="metis")
    dgl.distributed.partition_graph(g, "graph", 2, str(tmp / "stock2"),
                                    num_trainers_per_machine=1, part_method="metis")


def _hosts_sets(tmp: Path, hosts: tuple[list[str], list[str]], port: int) -> list[str]:
    """Overrides that put machine m's processes in namespace m with its own /dev/shm."""
    names, ips = hosts
    ip_config = tmp / f"ip_config_{port}.txt"
    ip_config.write_text("".join(f"{ip} {port}\n" for ip in ips))
    return [f"cluster.ip_config={ip_config}", f"cluster.netns=[{', '.join(names)}]",
            "cluster.netns_shm=true"]


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
    run_dir = prepare_run_dir(cfg, str(tmp / run_name), resume=False, force=True)
    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    if setting.system == "stock":
        args = _stock_args(cfg) + (["--gloo-ifname", LINK] if cfg.cluster.netns else [])
        peaks = run_dgl_job(run_dir, part_dir / "graph.json", cfg.cluster, STOCK_TRAINER, args,
                            cfg.train.timeout_s, stock=True)
        summary = json.loads((run_dir / "stock_summary.json").read_text())
        lines = [json.loads(ln) for ln in
                 (run_dir / "stock_metrics.jsonl").read_text().splitlines() if ln.strip()]
        summary.update(wall_s=time.perf_counter() - t0, peak_rss_mb=max(peaks.values()))
    else:
        summary = launch(cfg, run_dir, resume=False)
        lines = read_records(run_dir)
    steady = lines[1:] or lines

    def _mid(key: str) -> Optional[float]:
        values = [r[key] for r in steady if r.get(key) is not None]
        return median(values) if values else None

    return {"samples_per_s": median(r["samples_per_s"] for r in steady),
            "epoch_s": median(r["epoch_s"] for r in steady), "test_acc": summary["test_acc"],
            "remote_feature_bytes": _mid("remote_feature_bytes"),
            "rpc_sample_requests": _mid("rpc_sample_requests"),
            "cache_hit_rate": _mid("cache_hit_rate"), "wall_s": summary["wall_s"],
            "peak_rss_mb": summary["peak_rss_mb"], "load1": load1}


def _row(setting: Setting, runs: list[dict]) -> dict:
    """One table row: the medians over a setting's runs, with the spread of the throughput."""
    row = {"setting": setting.name, "system": setting.system, "hosts": setting.hosts,
           "parts": setting.parts, "trainers": setting.trainers, "link": setting.link}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        row[key] = median(values) if values else None
    rates = [r["samples_per_s"] for r in runs]
    row["samples_per_s_min"], row["samples_per_s_max"] = min(rates), max(rates)
    return row


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
        hosts: dict[str, tuple[list[str], list[str]]] = {}
        skipped: dict[str, str] = {}
        for link, rate in (("veth", None), ("veth_throttled", THROTTLE)):
            try:
                hosts[link] = stack.enter_context(emulated_hosts(rate=rate))
            except HostsUnavailable as exc:
                skipped[link] = str(exc)
        settings = [s for s in _settings() if s.link == "local" or s.link in hosts]
        runs: dict[str, list[dict]] = {s.name: [] for s in settings}
        port = 30050
        for r in range(repeats):
            for i, s in enumerate(settings):
                host_sets: list[str] = []
                if s.link in hosts:
                    port += 1  # a fresh server port per job: no TIME_WAIT clash
                    host_sets = _hosts_sets(tmp, hosts[s.link], port)
                runs[s.name].append(_run(s, base, tmp, f"run{i}-{r}", host_sets))
                print(f"  [{r + 1}/{repeats}] {s.name}: "
                      f"{runs[s.name][-1]['samples_per_s']:,.0f} seeds/s", flush=True)
    rows = {s.name: _row(s, runs[s.name]) for s in settings}
    for row in rows.values():
        ref = _stock_row(rows.values(), row["link"])
        row["ratio_vs_stock"] = row["samples_per_s"] / ref["samples_per_s"] if ref else None
        report.add(row)
    report.extra["skipped"] = skipped
    return report.save()


def _stock_row(rows: Iterable[dict], link: str) -> Optional[dict]:
    """The stock row a row of ``link`` is compared with."""
    for row in rows:
        if row["system"] == "stock" and row["link"] == link:
            return row
    return None


COLUMNS = ("setting", "system", "hosts", "parts", "trainers", "link", "samples_per_s",
           "samples_per_s_min", "samples_per_s_max", "ratio_vs_stock", "epoch_s", "test_acc",
           "remote_feature_bytes", "rpc_sample_requests", "cache_hit_rate", "load1", "wall_s",
           "peak_rss_mb")
KEY = ("setting",)
TITLE = "Sampled distributed training: dsgraph vs stock DistDGL (one host, two emulated hosts)"
TARGETS = {"local": 1.0, "veth": 1.3, "veth_throttled": 1.5}


def _notes(payload: dict) -> list[str]:
    """Each deployment's ratio against its stock row, the accuracy gap, skipped rows."""
    records = payload["records"]
    out = []
    for link, target in TARGETS.items():
        stock = _stock_row(records, link)
        ours = [r for r in records if r["system"] == "dsgraph" and r["link"] == link
                and r["parts"] == 2]
        if stock is None or not ours:
            continue
        parts = [f"{r['setting']}: **{r['ratio_vs_stock']:.2f}x** "
                 f"({r['samples_per_s']:,.0f} vs {stock['samples_per_s']:,.0f} seeds/s; "
                 f"test accuracy {r['test_acc'] - stock['test_acc']:+.3f})" for r in ours]
        out.append(f"**{link}** vs {stock['setting']} (target >= {target:.1f}x, accuracy "
                   f"within 0.005): " + "; ".join(parts) + ".")
    for link, why in payload.get("skipped", {}).items():
        out.append(f"**{link}** rows skipped: {why}.")
    return out


def _plot(rows: list[dict], fig) -> None:
    """Training throughput (with the repeats' range) and test accuracy, one bar per setting."""
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    ys = [-i for i in range(len(rows))]  # the first row on top, as in the table
    colours = ["tab:gray" if r["system"] == "stock" else "tab:blue" for r in rows]
    bars(ax1, ys, rows, "samples_per_s", KEY, horizontal=True, color=colours)
    for y, r in zip(ys, rows):
        if r.get("samples_per_s_min") is not None:
            ax1.plot([r["samples_per_s_min"], r["samples_per_s_max"]], [y, y], color="k", lw=1)
    ax1.set_xlabel("training seeds / s (median, range of repeats); grey: stock DGL")
    ax1.set_yticks(ys, [r["setting"] for r in rows], fontsize=7)
    bars(ax2, ys, rows, "test_acc", KEY, horizontal=True, color="tab:green")
    ax2.set_xlabel("test accuracy")
    ax2.set_xlim(0, 1)


VIEW = View("sampled", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes, figsize=(11.0, 6.0))


def render(quick: bool = False) -> Path:
    """Redraw sampled.md and sampled.png from the saved sampled.json."""
    return render_saved(VIEW, quick)
