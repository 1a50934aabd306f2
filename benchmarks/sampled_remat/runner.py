"""Running the ``sampled_remat`` benchmark: partitions, the memory and timing jobs of every
setting, one record each."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import jobs, memory
from benchmarks.harness import Report
from benchmarks.sampled_remat.records import add_ratios, combine, job_figures
from benchmarks.sampled_remat.report import VIEW
from benchmarks.sampled_remat.settings import (MODELS, VARIANTS, dataset_overrides, job_config,
                                               report_settings, scale)


def _partitions(scale: dict, feat_dim: int) -> list[str]:
    """Dataset overrides of the graph with ``feat_dim`` features; its 2 partitions (cached)."""
    from dsgraph import config as config_mod
    from dsgraph.data import load_graph
    from dsgraph.partition import partition_graph
    base = dataset_overrides(scale, feat_dim)
    cfg = config_mod.load("configs/default.yaml", base)
    out = Path(cfg.partition.out_dir)
    if not (out / "graph.json").exists():
        partition_graph(load_graph(cfg.dataset), 2, out, force=True)
    return base


def _job(base: list[str], setting: dict, scale: dict, run_dir: Path,
         memory_job: bool) -> dict[str, Any]:
    """One fresh job of ``setting``, a memory job (mmap-served allocations, ``mem_epochs``) or
    a timing job (default allocator, ``epochs``); its figures (:func:`job_figures`)."""
    job = jobs.train_job(job_config(base, setting, scale, memory_job), run_dir,
                         hooks=["benchmarks.sampled_remat.meter:measure"],
                         env=memory.MMAP_ENV if memory_job else None)
    return job_figures(job.summary, job.epochs)


def run(quick: bool) -> Path:
    """Every model x fanouts x feature width x variant, ``repeats`` fresh jobs each."""
    sc = scale(quick)
    report = Report(VIEW, quick, repeats=sc["repeats"])
    report.extra["settings"] = report_settings(sc)
    t_start = time.perf_counter()
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dsgraph-remat-") as tmpd:
        for feat_dim in sc["feat_dims"]:
            base = _partitions(sc, feat_dim)
            for fanouts in sc["fanouts"]:
                for model in MODELS:
                    for variant in VARIANTS:
                        setting = {"model": model, "fanouts": list(fanouts),
                                   "feat_dim": feat_dim, "variant": variant}
                        runs = {mem: [_job(base, setting, sc,
                                           Path(tmpd) / f"run{len(records)}-{r}-{mem}", mem)
                                      for r in range(sc["repeats"])]
                                for mem in (True, False)}
                        records.append(report.add(combine(setting, runs[True], runs[False])))
                        # Saved as it goes: an interrupted full run keeps its finished part.
                        add_ratios(records)
                        report.extra["wall_s"] = time.perf_counter() - t_start
                        report.save(partial=True)
    add_ratios(records)
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()
