"""Running the ``compression`` benchmark: per model and mode, the timing sweep over settings, the
step peaks, accuracy of the key settings; one record per setting."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import dgl
import torch

from benchmarks.compression.case import (Case, context, measure_step_peak, timed_pairs,
                                         torch_path_profile, train_accuracy)
from benchmarks.compression.report import VIEW
from benchmarks.compression.settings import (ACC_SETTINGS, PEAK_SETTINGS, RP, TIMING_PAIRS,
                                             Scale, compression_settings, scale)
from benchmarks.harness import Report, median
from dsgraph.compress import CompressionConfig, native
from dsgraph.data.synthetic import generate

Settings = list[tuple[str, Optional[CompressionConfig]]]


def _timing_records(case: Case, settings: Settings, pairs: int,
                    quick: bool) -> tuple[dict[str, dict], dict]:
    """Each compressed setting's record from interleaved (fp32, setting) epoch pairs, and the
    fp32 record (its epoch time: the median of every interleaved fp32 epoch)."""
    name, mode = case.name, case.mode
    model, opt = case.model()
    case.epoch(model, opt, context(None))  # warm-up once (allocator, DGL graph formats)
    recs: dict[str, dict] = {}
    fp_times: list[float] = []
    for label, cfg in settings:
        if cfg is None:
            continue
        n = pairs if quick else TIMING_PAIRS.get(label, pairs)
        r, times, ratios = timed_pairs(case, cfg, n)
        fp_times += [-t for t in times if t < 0]
        recs[label] = {"model": name, "mode": mode, "bits": cfg.bits,
                       "block_size": 0 if cfg.granularity == "row" else cfg.block_size,
                       "levels": cfg.levels, "projection": cfg.projection,
                       "saved_bytes": r["saved_bytes"], "fp32_bytes": r["fp32_bytes"],
                       "quantized_bytes": r["quantized_bytes"],
                       "epoch_s": median(t for t in times if t > 0),
                       "time_overhead_vs_fp32": median(ratios) - 1, "timing_pairs": n,
                       "peak_step_mb": None, "test_acc": None,
                       "pack_s_per_epoch": r["pack_s"], "unpack_s_per_epoch": r["unpack_s"],
                       "loadavg_1m": os.getloadavg()[0]}
    model, opt = case.model()
    fp = case.epoch(model, opt, context(None))
    fp_rec = {"model": name, "mode": mode, "bits": 32, "block_size": None, "levels": None,
              "projection": None, "saved_bytes": fp["saved_bytes"], "fp32_bytes": fp["fp32_bytes"],
              "epoch_s": median(fp_times), "time_overhead_vs_fp32": 0.0, "timing_pairs": None,
              "peak_step_mb": None, "test_acc": None,
              "pack_s_per_epoch": fp["pack_s"], "unpack_s_per_epoch": fp["unpack_s"],
              "loadavg_1m": os.getloadavg()[0]}
    return recs, fp_rec


def _add_ratios(recs: dict[str, dict], fp_rec: dict) -> list[tuple[str, dict]]:
    """Every record of a model and mode, fp32 first, with its ratios and ``setting`` label."""
    out = [("fp32", fp_rec)] + list(recs.items())
    for label, rec in out:
        rec["ratio_vs_fp32"] = fp_rec["saved_bytes"] / rec["saved_bytes"]
        row = recs["row-rp" if rec["projection"] not in (None, 1.0) else "row"]
        rec["ratio_vs_rowwise"] = rec["saved_bytes"] / row["saved_bytes"] if rec["bits"] != 32 else None
        if rec["bits"] != 32:  # the same ratio over the INT-b packs only (masks excluded)
            rec["quantized_ratio_vs_rowwise"] = rec["quantized_bytes"] / row["quantized_bytes"]
        rec["setting"] = label
    return out


def _sweep(report: Report, sc: Scale, quick: bool, tmp: Path, t_start: float) -> None:
    """Every model and mode: timing records, step peaks, accuracy (full graph), C-vs-torch
    profile (SAGE); the report is saved (partially) after each."""
    g, acc_g = generate(sc.data), generate(sc.acc_data)
    graph_file = str(tmp / "graph.dgl")
    dgl.save_graphs(graph_file, [g])  # read by every step-peak process
    report.extra["graph"] = {"num_nodes": g.num_nodes(), "num_edges": g.num_edges(),
                             "feat_dim": sc.data.feat_dim, "classes": sc.data.num_classes}
    settings = compression_settings(sc.blocks, sc.optimal)
    cfgs = dict(settings)
    profiles: dict[str, Any] = report.extra["profile_c_vs_torch"]
    for name, margs in sc.models.items():
        for mode in ("full", "sampled"):
            case = Case(g, name, mode, margs, sc.batch, sc.fanouts, sc.max_batches)
            recs, fp_rec = _timing_records(case, settings, sc.pairs, quick)
            case_args = {"graph_file": graph_file, "model": name, "mode": mode, "margs": margs,
                         "batch": sc.batch, "fanouts": sc.fanouts, "max_batches": sc.max_batches}
            for label in PEAK_SETTINGS:
                rec = fp_rec if label == "fp32" else recs[label]
                rec["peak_step_mb"] = measure_step_peak(case_args, cfgs[label], tmp)
            for _, rec in _add_ratios(recs, fp_rec):
                report.add(rec)
            if mode == "full":
                acc_case = Case(acc_g, name, mode, margs, sc.batch, sc.fanouts, sc.max_batches)
                for label in ACC_SETTINGS[name]:
                    rec = fp_rec if label == "fp32" else recs[label]
                    rec["test_acc"] = train_accuracy(acc_case, cfgs[label], sc.acc_epochs[name])
                    rec["acc_epochs"] = sc.acc_epochs[name]
                    print(f"  accuracy {name}/{label}: {rec['test_acc']:.4f}", flush=True)
                if name == "sage":
                    profiles[f"{name}/{mode}"] = torch_path_profile(case, cfgs["block256-uniform"])
            # Save as we go so an interrupted full run still leaves its finished part on disk.
            report.extra["wall_s"] = time.perf_counter() - t_start
            report.save(partial=True)


def run(quick: bool) -> Path:
    """Sweep models x modes x settings; write benchmarks/reports/compression.*."""
    # One thread, as every dsgraph worker runs (OMP_NUM_THREADS=1). With two threads in one
    # process the kernels' thread split competes with OpenMP's spin-waiting workers (measured
    # on sampled SAGE: +27-33% epoch overhead at 2 threads against +5% at 1).
    torch.set_num_threads(int(os.environ.get("DSGRAPH_BENCH_THREADS", "1")))
    sc = scale(quick)
    report = Report(VIEW, quick, repeats=sc.pairs)
    report.extra["settings"] = {"acc_epochs_full_graph": sc.acc_epochs,
                                "acc_graph_nodes": sc.acc_data.num_nodes,
                                "batch_size": sc.batch, "fanouts": sc.fanouts,
                                "sampled_batches_per_epoch": sc.max_batches,
                                "timing_pairs": {"default": sc.pairs,
                                                 **({} if quick else TIMING_PAIRS)},
                                "projection_kept_fraction": RP,
                                "native_kernels": native.available(),
                                "threads": torch.get_num_threads(),
                                "step_peak": "fresh process per setting"}
    report.extra["profile_c_vs_torch"] = {}
    report.extra["complete"] = False
    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="dsgraph-compression-"))
    try:
        _sweep(report, sc, quick, tmp, t_start)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.extra["wall_s"] = time.perf_counter() - t_start
    report.extra["complete"] = True
    return report.save()
