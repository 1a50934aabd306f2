"""The ``sampled_remat`` benchmark's record logic: job figures, medians and spreads, ratios, rows."""
from __future__ import annotations

import pytest

from benchmarks.sampled_remat.records import add_ratios, combine, job_figures
from benchmarks.sampled_remat.report import VIEW, table_rows


def _summary(acts: list[list[float]], times: list[list[float]], test_acc: float) -> dict:
    return {"bench_trainers": [{"epoch_act_mb": a, "batch_s": t, "rss_before_mb": 100.0,
                                "rss_warm_mb": 102.0 + i} for i, (a, t) in enumerate(zip(acts, times))],
            "last_test_acc": test_acc, "test_acc": test_acc + 0.1, "wall_s": 5.0}


def test_job_figures_takes_worst_trainer_per_epoch_and_slower_trainer_times() -> None:
    summary = _summary([[10.0, 30.0, 12.0], [20.0, 5.0]], [[0.1, 0.2, 0.3], [0.5, 0.6]], 0.8)
    records = [{"val_acc": 0.70, "remote_feature_bytes": 2**20},
               {"val_acc": 0.752, "remote_feature_bytes": 3 * 2**20},
               {"val_acc": 0.755, "remote_feature_bytes": 2 * 2**20}]
    f = job_figures(summary, records)
    assert f["epoch_act_mb"] == [20.0, 30.0]  # epochs both trainers measured, worst of the two
    assert f["batch_times"] == [0.5, 0.6]
    assert f["warm_growth_mb"] == 3.0
    assert f["test_acc"] == 0.8  # the last epoch's, not the best epoch's
    assert f["settled"] and f["remote_feature_mb"] == 2.0
    records[-1]["val_acc"] = 0.76  # 0.8 point from the previous evaluation
    assert not job_figures(summary, records)["settled"]


def _job(acts: list[float], times: list[float], acc: float, settled: bool = True) -> dict:
    return {"epoch_act_mb": acts, "batch_times": times, "test_acc": acc, "settled": settled,
            "val_accs": [acc], "warm_growth_mb": 1.0, "rss_before_mb": 50.0,
            "remote_feature_mb": 0.5, "wall_s": 10.0}


def test_combine_memory_from_memory_jobs_time_and_accuracy_from_timing_jobs() -> None:
    setting = {"model": "gat", "fanouts": [25, 25], "feat_dim": 512, "variant": "stock"}
    mem = [_job([10.0, 14.0], [4.0, 4.0], 0.1), _job([12.0], [6.0], 0.2)]
    timed = [_job([30.0], [1.0, 1.0, 2.0], 0.80), _job([50.0], [3.0, 3.0], 0.82, settled=False)]
    rec = combine(setting, mem, timed)
    assert rec["peak_act_mb"] == 12.0 and rec["act_spread_mb"] == 4.0  # memory jobs' epochs
    assert rec["act_default_mb"] == 40.0  # the timing jobs' epochs
    assert rec["batch_s"] == 2.0  # median of the timing jobs' medians 1.0 and 3.0
    assert rec["batch_mmap_s"] == 5.0  # the memory jobs' (4.0 and 6.0)
    assert rec["batch_spread_s"] > 0
    assert rec["test_acc"] == pytest.approx(0.81) and not rec["acc_settled"]
    assert rec["measured_epochs"] == 3 and rec["jobs"] == 4 and rec["wall_s"] == 40.0


def test_ratios_against_stock_of_the_same_setting_and_rows() -> None:
    recs = []
    for variant, act, t, acc in (("stock", 100.0, 1.0, 0.80), ("remat", 40.0, 1.2, 0.80),
                                 ("remat_int2", 20.0, 1.5, 0.79)):
        recs.append({"model": "sage", "fanouts": [10, 25], "feat_dim": 128, "variant": variant,
                     "peak_act_mb": act, "batch_s": t, "test_acc": acc,
                     "batch_mmap_s": 2 * t, "act_default_mb": 3 * act})
    recs.append({"model": "sage", "fanouts": [25, 25], "feat_dim": 128, "variant": "remat",
                 "peak_act_mb": 5.0, "batch_s": 1.0, "test_acc": 0.5})  # its stock is missing
    add_ratios(recs)
    assert [r["act_ratio"] for r in recs] == [1.0, 0.4, 0.2, None]
    assert recs[2]["time_ratio"] == 1.5 and recs[2]["acc_delta"] == pytest.approx(-0.01)
    assert recs[2]["time_ratio_mmap"] == 1.5 and recs[1]["act_ratio_default"] == pytest.approx(0.4)
    assert recs[3]["time_ratio_mmap"] is None
    rows = table_rows(recs)
    assert rows[0]["fanouts"] == "10,25" and recs[0]["fanouts"] == [10, 25]
    assert set(VIEW.key) <= set(VIEW.columns)
