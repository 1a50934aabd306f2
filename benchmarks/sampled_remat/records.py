"""The ``sampled_remat`` records: one job's figures, a setting's record, ratios against stock."""
from __future__ import annotations

import statistics
from typing import Any

from benchmarks.harness import median
from benchmarks.sampled_remat.settings import SETTLED


def job_figures(summary: dict, records: list[dict]) -> dict[str, Any]:
    """One job's figures from its metrics.json and metrics.jsonl: per measured epoch the worst
    trainer's activation MB; the slower trainer's batch times; final accuracy and whether the
    last two validation accuracies are within ``SETTLED``."""
    trainers = summary["bench_trainers"]
    epochs = min(len(t["epoch_act_mb"]) for t in trainers)
    timed = [t["batch_s"] for t in trainers if t["batch_s"]]
    vals = [r["val_acc"] for r in records if r.get("val_acc") is not None]
    return {"epoch_act_mb": [max(t["epoch_act_mb"][e] for t in trainers) for e in range(epochs)],
            # peak minus RSS at the reset: excludes what the warm-up or evaluation left resident
            "epoch_growth_mb": [max(t.get("epoch_growth_mb", t["epoch_act_mb"])[e] for t in trainers)
                                for e in range(epochs)],
            "batch_times": max(timed, key=median) if timed else [],
            "warm_growth_mb": max(t["rss_warm_mb"] - t["rss_before_mb"] for t in trainers),
            "rss_before_mb": max(t["rss_before_mb"] for t in trainers),
            "test_acc": summary.get("last_test_acc", summary.get("test_acc")),
            "settled": len(vals) >= 2 and abs(vals[-1] - vals[-2]) <= SETTLED,
            "val_accs": vals,
            "remote_feature_mb": median(r.get("remote_feature_bytes", 0) for r in records) / 2**20,
            "wall_s": summary["wall_s"]}


def _epoch_acts(jobs: list[dict]) -> list[float]:
    return [a for j in jobs for a in j["epoch_act_mb"]]


def _job_times(jobs: list[dict]) -> list[float]:
    return [median(j["batch_times"]) for j in jobs if j["batch_times"]]


def combine(setting: dict, mem_jobs: list[dict], time_jobs: list[dict]) -> dict[str, Any]:
    """A setting's record. Memory, from the memory jobs: median and max - min over every
    measured epoch of every job (each epoch's peak is measured afresh after a reset). Time and
    accuracy, from the timing jobs: median of the jobs' median batch times, spread = the
    interquartile range of all their batch times. ``batch_mmap_s``: the memory jobs' batch
    time; ``act_default_mb``: the timing jobs' activation memory (default allocator)."""
    acts, default_acts = _epoch_acts(mem_jobs), _epoch_acts(time_jobs)
    times = sorted(t for j in time_jobs for t in j["batch_times"])
    job_times, mmap_times = _job_times(time_jobs), _job_times(mem_jobs)
    accs = [j["test_acc"] for j in time_jobs if j["test_acc"] is not None]

    def quartile(q: int) -> float:
        return float(statistics.quantiles(times, n=4)[q]) if len(times) >= 2 else times[0]

    return {**setting, "peak_act_mb": median(acts) if acts else None,
            "act_spread_mb": max(acts) - min(acts) if acts else None,
            "batch_s": median(job_times) if job_times else None,
            "batch_spread_s": quartile(2) - quartile(0) if times else None,
            "batch_mmap_s": median(mmap_times) if mmap_times else None,
            "act_default_mb": median(default_acts) if default_acts else None,
            "test_acc": median(accs) if accs else None,
            "acc_spread": max(accs) - min(accs) if accs else None,
            "acc_settled": all(j["settled"] for j in time_jobs),
            "warm_growth_mb": median(j["warm_growth_mb"] for j in mem_jobs),
            "rss_before_mb": median(j["rss_before_mb"] for j in mem_jobs),
            "remote_feature_mb": median(j["remote_feature_mb"] for j in time_jobs),
            "jobs": len(mem_jobs) + len(time_jobs), "measured_epochs": len(acts),
            "batches_timed": len(times),
            "epoch_act_mb": [j["epoch_act_mb"] for j in mem_jobs],
            "epoch_growth_mb": [j.get("epoch_growth_mb") for j in mem_jobs],
            "val_accs": [j["val_accs"] for j in time_jobs],
            "wall_s": sum(j["wall_s"] for j in mem_jobs + time_jobs)}


def add_ratios(records: list[dict]) -> None:
    """``act_ratio`` and ``time_ratio`` (json also ``time_ratio_mmap``, ``act_ratio_default``:
    the other allocator's): each record against ``stock`` of the same model, fanouts and
    feature width (None where that stock record is missing)."""
    stock = {(r["model"], str(r["fanouts"]), r["feat_dim"]): r for r in records
             if r["variant"] == "stock"}
    for r in records:
        s = stock.get((r["model"], str(r["fanouts"]), r["feat_dim"]))
        ok = s is not None and s["peak_act_mb"] and s["batch_s"] and r["batch_s"] is not None
        r["act_ratio"] = r["peak_act_mb"] / s["peak_act_mb"] if ok else None
        r["time_ratio"] = r["batch_s"] / s["batch_s"] if ok else None
        for col, ratio in (("batch_mmap_s", "time_ratio_mmap"),
                           ("act_default_mb", "act_ratio_default")):
            r[ratio] = (r[col] / s[col] if s is not None and r.get(col) is not None
                        and s.get(col) else None)
        r["acc_delta"] = (r["test_acc"] - s["test_acc"]
                          if s is not None and None not in (r["test_acc"], s["test_acc"]) else None)
