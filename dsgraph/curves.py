"""A run's training curves: ``RUN/curves.png`` drawn from the epoch records of metrics.jsonl."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dsgraph.errors import UserError
from dsgraph.fsutil import atomic_write_with
from dsgraph.metrics import read_records

# (panel, y label, record keys drawn in it). A key absent from every record draws nothing and a
# panel without any series is left out, so one table serves every task: accuracy and F1
# (classification), RMSE (node regression; DS-MPNN, in standardized units), ROC-AUC and F1
# (multilabel), relative L2 (DS-MPNN; other units than RMSE, hence its own panel).
PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("loss", "training loss", ("loss",)),
    ("accuracy", "accuracy", ("train_acc", "val_acc", "test_acc")),
    ("f1", "macro F1", ("train_macro_f1", "val_macro_f1", "test_macro_f1")),
    ("rocauc", "ROC-AUC", ("val_rocauc", "test_rocauc")),
    ("rmse", "RMSE", ("train_rmse", "val_rmse", "test_rmse")),
    ("rel_l2", "relative L2 error", ("test_rel_l2",)),
    ("lr", "learning rate", ("lr",)),
)

Series = dict[str, dict[str, tuple[list[int], list[float]]]]


def curve_series(records: list[dict[str, Any]]) -> Series:
    """What :func:`plot_curves` draws: panel -> record key -> (epochs, values).

    An epoch whose record lacks a key (no evaluation that epoch) or holds None or a non-finite
    value has no point; the learning-rate panel appears only when the rate changes.
    """
    out: Series = {}
    for panel, _, keys in PANELS:
        series = {}
        for key in keys:
            pts = [(int(r["epoch"]), float(r[key])) for r in records
                   if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
            if pts:
                series[key] = ([e for e, _ in pts], [v for _, v in pts])
        if panel == "lr" and all(len(set(v)) <= 1 for _, v in series.values()):
            continue  # a constant rate says nothing a curve would show
        if series:
            out[panel] = series
    return out


def run_curves(run_dir: str | Path) -> Series:
    """The plotted series of a run folder; a missing or empty metrics.jsonl is a UserError."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{path}: no such file; expected the metrics.jsonl of a run folder "
                        f"(written by python -m train)")
    series = curve_series(read_records(run_dir))
    if not series:
        raise UserError(f"{path}: no epoch records with metrics to plot")
    return series


def plot_curves(run_dir: str | Path) -> Path:
    """Draw ``RUN/curves.png`` (one panel per metric, against the epoch) from ``RUN/metrics.jsonl``
    and return its path; the file is replaced atomically."""
    fig = curves_figure(run_dir)
    out = Path(run_dir) / "curves.png"
    atomic_write_with(out, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    return out


def curves_figure(run_dir: str | Path) -> Any:
    """The matplotlib Figure of :func:`plot_curves` (each line's gid is its record key)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    series = run_curves(run_dir)
    labels = {panel: label for panel, label, _ in PANELS}
    fig = Figure(figsize=(4.0 * len(series), 3.6))
    FigureCanvasAgg(fig)  # the Agg canvas for this figure only: no global backend switch
    axes = fig.subplots(1, len(series), squeeze=False)[0]
    for ax, (panel, lines) in zip(axes, series.items()):
        for key, (epochs, values) in lines.items():
            ax.plot(epochs, values, marker="o" if len(epochs) <= 30 else None, ms=3,
                    label=key, gid=key)
        if panel == "loss" and _spans_decades(lines):
            ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel(labels[panel])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(lw=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(run_dir.resolve().name, fontsize=10)
    fig.tight_layout()
    return fig


def _spans_decades(lines: dict[str, tuple[list[int], list[float]]]) -> bool:
    """Whether positive values range over more than two decades (then a log axis reads better)."""
    values = [v for _, vs in lines.values() for v in vs]
    return min(values) > 0 and max(values) / min(values) > 100
