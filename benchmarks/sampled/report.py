"""The ``sampled`` report: table columns, skipped deployments, the figure, and redrawing from
the saved sampled.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from benchmarks.harness import View, bars, render_saved, throughput_bars

COLUMNS = ("setting", "system", "hosts", "parts", "trainers", "link", "samples_per_s",
           "samples_per_s_min", "samples_per_s_max", "ratio_vs_stock", "ratio_vs_limit", "epoch_s",
           "test_acc",
           "remote_feature_bytes", "rpc_sample_requests", "cache_hit_rate", "load1", "wall_s",
           "job_memory_mb", "peak_rss_mb")
KEY = ("setting",)
TITLE = ("Sampled distributed training: dsgraph vs stock DistDGL (one host, two emulated hosts) "
         "and the in-memory limit")


def stock_row(rows: Iterable[dict], link: str) -> Optional[dict]:
    """The stock row a row of ``link`` is compared with."""
    for row in rows:
        if row["system"] == "stock" and row["link"] == link:
            return row
    return None


def limit_row(rows: Iterable[dict]) -> Optional[dict]:
    """The limit row (plain DGL, the whole graph in memory, one process per core)."""
    for row in rows:
        if row["system"] == "dgl":
            return row
    return None


def _skipped(payload: dict) -> list[str]:
    """The deployments this run could not make, and why."""
    return [f"**{link}** rows skipped: {why}." for link, why in payload.get("skipped", {}).items()]


def _plot(rows: list[dict], fig: Any) -> None:
    """Training throughput (with the repeats' range) and test accuracy, one bar per setting."""
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    ys = [-i for i in range(len(rows))]  # the first row on top, as in the table
    colours = [{"stock": "tab:gray", "dgl": "black"}.get(r["system"], "tab:blue") for r in rows]
    throughput_bars(ax1, ys, rows, KEY, colours)
    bars(ax2, ys, rows, "test_acc", KEY, horizontal=True, color="tab:green")
    ax2.set_xlabel("test accuracy")
    ax2.set_xlim(0, 1)


VIEW = View("sampled", TITLE, COLUMNS, KEY, plot=_plot, notes=_skipped, figsize=(11.0, 6.0))


def render(quick: bool = False) -> Path:
    """Redraw sampled.md and sampled.png from the saved sampled.json."""
    return render_saved(VIEW, quick)
