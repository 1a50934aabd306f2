"""Running the ``sar`` benchmark: graphs and partitions, the jobs of each configuration, and
one record per (graph, model, configuration)."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import dgl
import torch

from benchmarks import jobs, memory
from benchmarks.harness import Report, median
from benchmarks.sar.measure import grad_err, reference_grads
from benchmarks.sar.report import VIEW
from benchmarks.sar.settings import (CACHE, EPOCHS, GRADS_FILE, MODELS, REPEATS, configurations,
                                     graphs, job_config)
from dsgraph.config import DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.partition import partition_graph


def _run_dgl(spec: dict, dtype: str, epochs: int, grads: bool, out: Path) -> dict:
    """One fresh plain DGL process (one thread, like every SAR worker)."""
    (out / GRADS_FILE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    res = memory.run_fresh("benchmarks.sar.measure:dgl_baseline",
                           {"graph_file": spec["graph_file"], "model": spec["model"],
                            "dtype": dtype, "epochs": epochs, "grads": grads, "out": str(out)},
                           out)
    res["wall_s"] = time.perf_counter() - t0
    res["grads"] = torch.load(out / GRADS_FILE) if grads else None
    return res


def _run_sar(spec: dict, n: int, dtype: str, epochs: int, grads: bool, out: Path) -> dict:
    """One real SAR job: N fresh ``dsgraph.modes.worker`` processes."""
    cfg = job_config(spec["parts"][n], n, spec["model"], spec["mode"], spec["chunk_rows"], dtype,
                     epochs)
    hook = "measure_grads" if grads else "measure"
    job = jobs.train_job(cfg, out, hooks=[f"benchmarks.sar.measure:{hook}"], env=memory.MMAP_ENV)
    summary, records, workers = job.summary, job.epochs, job.summary["bench_workers"]
    return {"act_mb": summary["train_mem_mb"], "peak_mb": max(summary["peak_rss_mb_per_worker"]),
            "rss_loaded_mb": max(w["rss_loaded_mb"] for w in workers),
            "rss_file_growth_mb": max(w["rss_file_growth_mb"] for w in workers),
            "act_per_worker": [w["act_mb"] for w in workers],
            "epoch_s": [r["epoch_s"] for r in records],
            "bytes_sent": [r["bytes_sent"] for r in records],
            "val_acc": [r["val_acc"] for r in records], "wall_s": summary["wall_s"],
            "grads": torch.load(job.run_dir / GRADS_FILE) if grads else None}


def _run(spec: dict, n: int, dtype: str, epochs: int, grads: bool, out: Path) -> dict:
    if spec["mode"] == "dgl":
        return _run_dgl(spec, dtype, epochs, grads, out)
    return _run_sar(spec, n, dtype, epochs, grads, out)


def _prepare(name: str, params: dict) -> tuple[Path, dict[int, Path]]:
    """Generate (cached) the graph file and its partitions for 1, 2 and 4 parts."""
    cfg = DatasetConfig(num_classes=20, feat_dim=64, seed=0, **params)
    root = CACHE / f"{name}-{cfg.num_nodes}-{cfg.avg_degree:g}-{cfg.homophily:g}"
    gfile = root / "graph.dgl"
    g = None
    if not gfile.exists():
        root.mkdir(parents=True, exist_ok=True)
        g = generate(cfg)
        dgl.save_graphs(str(gfile), [g])
    parts = {}
    for n in (1, 2, 4):
        pj = root / f"p{n}" / "graph.json"
        if not pj.exists():
            g = g if g is not None else dgl.load_graphs(str(gfile))[0][0]
            partition_graph(g, n, root / f"p{n}", method="metis" if n > 1 else "random",
                            force=True)
        parts[n] = pj.resolve()
    return gfile.resolve(), parts


def _measure(spec: dict, n: int, tmp: Path) -> tuple[list[dict], dict]:
    """Run a configuration ``REPEATS`` times in fresh processes (first-step float32 gradients in
    the first run), then once for 1 epoch in float64 for its first-step gradients."""
    runs = [_run(spec, n, "float32", EPOCHS, r == 0, tmp / f"run{r}") for r in range(REPEATS)]
    fp64 = _run(spec, n, "float64", 1, True, tmp / "fp64")
    return runs, fp64


def _record(gname: str, spec: dict, n: int, runs: list[dict], fp64: dict, ref: dict) -> dict:
    """The record of one configuration from its runs (medians; epoch 1 left out of times)."""
    first = runs[0]
    per_run_act = [res["act_mb"] for res in runs]
    return {"graph": gname, "mode": spec["mode"], "model": spec["model"], "workers": n,
            "chunk_rows": spec["chunk_rows"],
            "peak_act_mb": median(per_run_act),
            "peak_act_mb_runs": per_run_act,
            "peak_rss_mb": median(res["peak_mb"] for res in runs),
            "rss_loaded_mb": median(res["rss_loaded_mb"] for res in runs),
            "rss_file_growth_mb": max(res["rss_file_growth_mb"] for res in runs),
            "bytes_sent": median(res["bytes_sent"][e] for res in runs for e in range(1, EPOCHS)),
            "epoch_s": median(res["epoch_s"][e] for res in runs for e in range(1, EPOCHS)),
            "max_grad_rel_err": grad_err(fp64["grads"], ref["float64"]),
            "max_grad_rel_err_fp32": grad_err(first["grads"], ref["float32"]),
            "final_val_acc": first["val_acc"][-1],
            "act_per_worker_mb": [median(res["act_per_worker"][r] for res in runs)
                                  for r in range(n)],
            "job_wall_s": median(res["wall_s"] for res in runs)}


def _run_all(report: Report, quick: bool, tmp: Path, curves: dict) -> None:
    """Measure every (graph, model, configuration); add one record each to ``report``."""
    for gname, params in graphs(quick).items():
        gfile, parts = _prepare(gname, params)
        for model in MODELS:
            ref = reference_grads(gfile, model)
            base_act = None
            for mode, n, chunk in configurations(quick):
                spec = {"mode": mode, "model": model, "graph_file": str(gfile), "parts": parts,
                        "chunk_rows": chunk}
                runs, fp64 = _measure(spec, n, tmp / f"{gname}-{model}-{mode}-{n}-{chunk}")
                rec = _record(gname, spec, n, runs, fp64, ref)
                if mode == "dgl":
                    base_act = rec["peak_act_mb"]
                rec["act_ratio"] = rec["peak_act_mb"] / base_act if base_act else None
                report.add(rec)
                curves[f"{gname}/{model}/{mode}/{n}" + (f"/{chunk}" if chunk else "")] = \
                    runs[0]["val_acc"]


def run(quick: bool) -> Path:
    """Run every configuration (see the package docstring) and write the report."""
    report = Report(VIEW, quick, repeats=REPEATS)
    curves: dict[str, list] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-sar-"))
    t_start = time.perf_counter()
    try:
        _run_all(report, quick, tmp, curves)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.extra["val_acc_curves"] = curves
    report.extra["wall_s"] = time.perf_counter() - t_start
    return report.save()
