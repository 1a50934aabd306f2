"""The ``sampled_remat`` report: table rows, the figure, and redrawing from the saved json."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness import View, bars, render_saved
from benchmarks.sampled_remat.settings import VARIANTS

COLUMNS = ("model", "fanouts", "feat_dim", "variant", "peak_act_mb", "act_spread_mb",
           "act_ratio", "batch_s", "batch_spread_s", "time_ratio", "test_acc", "acc_settled",
           "remote_feature_mb")
KEY = ("model", "fanouts", "feat_dim", "variant")
TITLE = "Sampled training with rematerialization: peak activation memory per trainer, time, accuracy"


def table_rows(records: list[dict]) -> list[dict]:
    """The table rows (and what the figure draws): fanouts written as text, e.g. ``10,25``."""
    return [{**r, "fanouts": ",".join(str(f) for f in r["fanouts"])} for r in records]


def _plot(rows: list[dict], fig: Any) -> None:
    """Peak activation memory and time per batch, one bar per row, colour = variant."""
    colours = {"stock": "tab:gray", "remat": "tab:blue", "remat_int2": "tab:green"}
    settings = list(dict.fromkeys((r["model"], r["fanouts"], r["feat_dim"]) for r in rows))
    width = 0.8 / len(VARIANTS)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for i, variant in enumerate(VARIANTS):
        rs = [r for r in rows if r["variant"] == variant]
        xs = [settings.index((r["model"], r["fanouts"], r["feat_dim"])) + (i - 1) * width
              for r in rs]
        for ax, column in ((ax1, "peak_act_mb"), (ax2, "batch_s")):
            bars(ax, xs, rs, column, KEY, width=width, color=colours[variant], label=variant)
    ax1.set_ylabel("peak activation MB / trainer")
    ax2.set_ylabel("s / batch")
    ax2.set_xticks(range(len(settings)), [f"{m} [{f}] f{d}" for m, f, d in settings],
                   rotation=30, ha="right")
    ax1.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.grid(axis="y", lw=0.3)


VIEW = View("sampled_remat", TITLE, COLUMNS, KEY, rows=table_rows, plot=_plot,
            figsize=(12.0, 8.0))


def render(quick: bool = False) -> Path:
    """Redraw sampled_remat.md and sampled_remat.png from the saved sampled_remat.json."""
    return render_saved(VIEW, quick)
