"""Running the ``tasks`` benchmark: each config's partitions, emulated hosts, one fresh job per
row and repeat (dsgraph's trainer or the stock DGL link trainer), one record per row."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from benchmarks import jobs
from benchmarks.harness import Report, carry, chosen, median
from benchmarks.stock_link_inputs import TRAINER as STOCK_TRAINER
from benchmarks.stock_link_inputs import build
from benchmarks.tasks.report import SCORES, VIEW
from benchmarks.tasks.settings import LINK_CONFIG, THROTTLE, Setting, settings
from dsgraph import config as config_mod
from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.cluster.netns import LINK
from dsgraph.cli.partition import main as partition_main

def _folder(tmp: Path, setting: Setting) -> Path:
    """The partition folder of a row (one set per config)."""
    return tmp / Path(setting.config).stem / setting.partition


def _partitions(rows: list[Setting], base: dict[str, list[str]], tmp: Path) -> dict[Path, Any]:
    """Every partitioning the rows use, made once; stock rows' inputs (partition JSON, the
    evaluation edges, its trainer's arguments) by partition folder."""
    stock = {}
    for s in rows:
        out = _folder(tmp, s)
        if out.exists():
            continue
        sets = [*base[s.config], *(v for v in s.sets if v.startswith(("partition.", "task.name="))),
                f"partition.num_parts={s.parts}", f"partition.out_dir={out}"]
        if s.system == "stock":
            stock[out] = build(config_mod.load(s.config, sets), out)
            continue
        partition_main(["--config", s.config, *(a for v in sets for a in ("--set", v))])
    return stock


def _run(setting: Setting, base: list[str], tmp: Path, run_name: str, host_sets: list[str],
         stock: dict[Path, Any], seed: int, quick: bool) -> dict:
    """One fresh job of ``setting``; its steady-state throughput, test figures and memory."""
    part_dir = _folder(tmp, setting)
    epochs = [f"train.epochs={setting.epochs}"] if setting.epochs and not quick else []
    sets = [*base, *epochs, *setting.sets, *host_sets, f"partition.num_parts={setting.parts}",
            f"partition.out_dir={part_dir}", f"train.seed={seed}",
            f"cluster.trainers_per_machine={setting.trainers // setting.parts}"]
    cfg = config_mod.load(setting.config, sets)
    load1, t0 = os.getloadavg()[0], time.perf_counter()
    with jobs.SupervisedMemory() as mem:
        if setting.system == "stock":
            inputs = stock[part_dir]
            run_dir = jobs.run_folder(cfg, tmp / run_name)
            args = inputs.args + (["--gloo-ifname", LINK] if cfg.cluster.netns else [])
            run_dgl_job(run_dir, inputs.part_json, cfg.cluster, STOCK_TRAINER, args,
                        cfg.train.timeout_s, stock=True)
            summary = json.loads((run_dir / "stock_summary.json").read_text())
            lines = [json.loads(ln) for ln in
                     (run_dir / "stock_metrics.jsonl").read_text().splitlines() if ln.strip()]
            rates = [r["edges_per_s"] for r in lines]
        else:
            job = jobs.train_job(cfg, tmp / run_name)
            summary, lines = job.summary, job.epochs
            rates = [r["samples_per_s"] for r in lines if "samples_per_s" in r]  # not sar's
    out = {"wall_s": time.perf_counter() - t0, "job_memory_mb": mem.peak_mb, "load1": load1}
    if cfg.task_facts.trains_on == "links":
        steady = rates[1:] or rates
        out.update(edges_per_s=median(steady) if steady else None, mrr=summary["test_mrr"],
                   hits_at_k=summary[f"test_hits{cfg.task.hits_k}"],
                   hits_k=cfg.task.hits_k)
    else:
        out.update({key: summary.get(key) for key in SCORES})
    return out


def _row(setting: Setting, runs: list[dict], task: str) -> dict:
    """One table row: medians over a setting's runs, with the spread of throughput and score."""
    return jobs.median_row({"setting": setting.name, "task": task, "system": setting.system,
                            "hosts": setting.hosts, "parts": setting.parts,
                            "trainers": setting.trainers, "link": setting.link,
                            "runs": len(runs)},
                           runs, ("edges_per_s", "mrr", *SCORES))


def _base(config: str, quick: bool, tmp: Path) -> list[str]:
    """Every row's overrides of ``config``: graph size, data cache, epochs (link prediction's
    timed rows: 4, enough for a steady median of epochs 2..; node tasks: their config's), one
    evaluation."""
    link = config == LINK_CONFIG
    epochs = [f"train.epochs={2 if link else 3}"] if quick else ["train.epochs=4"] if link else []
    return [*(["dataset.num_nodes=3000"] if quick else []), f"dataset.cache_dir={tmp / 'data'}",
            "train.timeout_s=900", *epochs, "train.eval_every=0"]


def _task_of(setting: Setting) -> str:
    """The task a row trains (its config's, or the one its overrides name)."""
    return config_mod.load(setting.config,
                           [v for v in setting.sets if v.startswith("task.name=")]).task_name


def run(quick: bool, datasets: Optional[list[str]] = None) -> Path:
    """Run the rows of the tasks ``datasets`` names (all by default; timed rows ``repeats``
    times, round-robin as in ``sampled``; the others once per training seed) and write the
    report; the other tasks' records are carried from the saved report."""
    repeats, seeds = (1, 1) if quick else (3, 2)
    report = Report(VIEW, quick, repeats=repeats)
    every = settings()
    task = {s.name: _task_of(s) for s in every}
    chosen_tasks = chosen({t: t for t in task.values()}, datasets)
    rows = [s for s in every if task[s.name] in chosen_tasks]
    with tempfile.TemporaryDirectory(prefix="dsgraph-tasks-") as tmpd, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmpd)
        base = {s.config: _base(s.config, quick, tmp) for s in rows}
        hosts, skipped = (jobs.emulated_links(stack, THROTTLE)
                          if any(s.link != "local" for s in rows) else ({}, {}))
        rows = [s for s in rows if s.link == "local" or s.link in hosts]
        stock = _partitions(rows, base, tmp)
        # accuracy rows: one run per training seed; timed rows: repeats of seed 0
        runs = jobs.round_robin(
            rows, lambda s: repeats if s.timed else seeds, hosts, tmp, 30150,
            lambda s, i, r, host_sets: _run(s, base[s.config], tmp, f"run{i}-{r}", host_sets,
                                            stock, 0 if s.timed else r, quick),
            _progress)
    for s in rows:
        report.add(_row(s, runs[s.name], task[s.name]))
    carry(report, quick, "task", [t for t in dict.fromkeys(task.values()) if t not in chosen_tasks])
    order = {s.name: i for i, s in enumerate(every)}  # carried rows back in table order
    report.records.sort(key=lambda r: order.get(r["setting"], len(order)))
    for row in report.records:
        ref = _stock_row(report.records, row["link"])
        row["ratio_vs_stock"] = (row["edges_per_s"] / ref["edges_per_s"]
                                 if ref and row.get("edges_per_s") else None)
    report.extra.setdefault("skipped", {}).update(skipped)
    return report.save()


def _stock_row(rows: list[dict], link: str) -> Optional[dict]:
    """The stock link-prediction row of deployment ``link``."""
    return next((r for r in rows if r["system"] == "stock" and r["link"] == link), None)


def _progress(result: dict) -> str:
    """A run's headline figures for the progress line."""
    keys = ("edges_per_s", "mrr", *SCORES, "job_memory_mb")
    return ", ".join(f"{k} {result[k]:.4g}" for k in keys if result.get(k) is not None)
