"""``dsgraph.curves``: a run's curves.png drawn from its metrics.jsonl, point for point."""
from __future__ import annotations

import math

import pytest

from dsgraph.curves import curve_series, curves_figure, plot_curves, run_curves
from dsgraph.errors import UserError
from dsgraph.metrics import MetricsLog


def _write(run_dir, records):
    log = MetricsLog(run_dir)
    for r in records:
        log.epoch(r)
    return records


def _graph_records():
    """Sampled/SAR-like epochs: accuracy evaluated every second epoch, a cosine learning rate."""
    out = []
    for e in range(1, 7):
        r = {"epoch": e, "loss": 2.0 / e, "train_acc": 0.1 * e, "epoch_s": 0.5,
             "lr": 0.005 * (1 + math.cos(math.pi * (e - 1) / 6))}
        if e % 2 == 0:
            r.update(val_acc=0.09 * e, test_acc=0.08 * e)
        out.append(r)
    return out


def _drawn(fig):
    """record key -> (epochs, values) of every line in the figure, read from what was drawn."""
    return {ln.get_gid(): (list(ln.get_xdata()), list(ln.get_ydata()))
            for ax in fig.axes for ln in ax.lines if ln.get_gid()}


def test_graph_run_curves_equal_the_records(tmp_path):
    records = _write(tmp_path, _graph_records())
    out = plot_curves(tmp_path)
    assert out == tmp_path / "curves.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5_000
    assert not list(tmp_path.glob(".curves.png.*"))  # the atomic write left no temporary file
    series = run_curves(tmp_path)
    assert list(series) == ["loss", "accuracy", "lr"]
    for key in ("loss", "train_acc", "lr"):
        panel = {"loss": "loss", "train_acc": "accuracy", "lr": "lr"}[key]
        assert series[panel][key] == ([r["epoch"] for r in records], [r[key] for r in records])
    evaluated = [r for r in records if "val_acc" in r]
    for key in ("val_acc", "test_acc"):  # epochs without evaluation have no point
        assert series["accuracy"][key] == ([r["epoch"] for r in evaluated],
                                           [r[key] for r in evaluated])
    drawn = _drawn(curves_figure(tmp_path))
    assert drawn == {k: v for lines in series.values() for k, v in lines.items()}


def test_dsmpnn_run_curves_rmse_and_rel_l2_without_constant_lr(tmp_path):
    records = [{"epoch": e, "loss": 0.5 / e, "lr": 0.01, "graph_s": 0.1} for e in (1, 2, 3)]
    records[-1].update(test_rmse=0.19, test_rel_l2=0.11, train_rmse=0.17)
    _write(tmp_path, records)
    series = curve_series(records)
    assert list(series) == ["loss", "rmse", "rel_l2"]  # a constant learning rate: no panel
    assert series["rmse"] == {"train_rmse": ([3], [0.17]), "test_rmse": ([3], [0.19])}
    assert series["rel_l2"] == {"test_rel_l2": ([3], [0.11])}
    assert _drawn(curves_figure(tmp_path))["test_rmse"] == ([3], [0.19])


def test_missing_or_empty_metrics_is_one_line_error(tmp_path):
    with pytest.raises(UserError, match=r"metrics.jsonl: no such file; expected the metrics.jsonl"):
        plot_curves(tmp_path / "nowhere")
    MetricsLog(tmp_path)  # an empty metrics.jsonl, as a run killed before its first epoch
    with pytest.raises(UserError) as err:
        plot_curves(tmp_path)
    assert str(err.value) == f"{tmp_path / 'metrics.jsonl'}: no epoch records with metrics to plot"
    assert "\n" not in str(err.value) and not (tmp_path / "curves.png").exists()
