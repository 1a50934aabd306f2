"""The ``hetero`` report: table columns, the comparison with stock, the accuracy lines, the
figure, and redrawing from the saved hetero.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from benchmarks.harness import View, bars, render_saved, throughput_bars

COLUMNS = ("setting", "graph", "system", "model", "link", "hosts", "parts", "trainers",
           "samples_per_s", "samples_per_s_min", "samples_per_s_max", "ratio_vs_stock",
           "test_acc", "job_memory_mb", "memory_ratio_vs_stock", "peak_rss_mb",
           "feature_cache_mb", "cache_hit_rate", "remote_feature_bytes", "epoch_s", "load1",
           "wall_s")
KEY = ("setting",)
TITLE = ("Heterogeneous graph (RGCN): dsgraph vs stock DistDGL, partitions, and the homogeneous "
         "projection")


def stock_row(rows: Iterable[dict], link: str) -> Optional[dict]:
    """The stock row a row of ``link`` is compared with (none on one host)."""
    for row in rows:
        if row["system"] == "stock" and row["link"] == link:
            return row
    return None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def compare(rows: list[dict]) -> list[dict]:
    """Set every row's ``ratio_vs_stock`` (throughput) and ``memory_ratio_vs_stock`` (job
    memory) against the stock row of its link; return ``rows``."""
    for row in rows:
        ref = stock_row(rows, row["link"])
        row["ratio_vs_stock"] = _ratio(row.get("samples_per_s"), ref and ref["samples_per_s"])
        row["memory_ratio_vs_stock"] = _ratio(row.get("job_memory_mb"),
                                              ref and ref.get("job_memory_mb"))
    return rows


def _find(rows: list[dict], **want: Any) -> Optional[dict]:
    return next((r for r in rows if all(r.get(k) == v for k, v in want.items())), None)


def _gap(text: str, a: Optional[dict], b: Optional[dict]) -> Optional[str]:
    """``text``: the test accuracies of rows ``a`` and ``b`` and their difference."""
    if not a or not b or a.get("test_acc") is None or b.get("test_acc") is None:
        return None
    return (f"{text}: test accuracy {a['test_acc']:.4f} vs {b['test_acc']:.4f} "
            f"({a['test_acc'] - b['test_acc']:+.4f}).")


def _notes(payload: dict) -> list[str]:
    """The accuracy comparisons the rows answer, then the settings and skipped deployments."""
    rows = payload["records"]
    local = dict(system="dsgraph", link="local")
    one = _find(rows, model="rgcn", parts=1, **local)
    two = _find(rows, model="rgcn", parts=2, **local)
    homo = _find(rows, model="sage_homogeneous", **local)
    lines = [_gap("**RGCN, 2 partitions vs 1** (one host)", two, one),
             _gap("**RGCN vs GraphSAGE of the same size on the homogeneous projection** "
                  "(2 partitions, one host)", two, homo)]
    for link in ("veth", "veth_throttled"):
        lines.append(_gap(f"**dsgraph vs stock DGL RGCN** ({link})",
                          _find(rows, system="dsgraph", model="rgcn", link=link),
                          stock_row(rows, link)))
    notes = [n for n in lines if n]
    s = payload.get("settings")
    if s:
        notes.append("Settings: " + ", ".join(f"{k} {v}" for k, v in s.items()) + ".")
    notes += [f"**{link}** rows skipped: {why}." for link, why in payload.get("skipped", {}).items()]
    return notes


def _plot(rows: list[dict], fig: Any) -> None:
    """Training throughput (with the repeats' range) and job memory, one bar per row."""
    ax1, ax2 = fig.subplots(1, 2, sharey=True)
    ys = [-i for i in range(len(rows))]  # the first row on top, as in the table
    colours = ["tab:gray" if r["system"] == "stock" else
               "tab:orange" if r["model"] == "sage_homogeneous" else "tab:blue" for r in rows]
    throughput_bars(ax1, ys, rows, KEY, colours)
    bars(ax2, ys, rows, "job_memory_mb", KEY, horizontal=True, color=colours)
    ax2.set_xlabel("job memory, MiB (peak summed PSS)")


VIEW = View("hetero", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes, figsize=(11.0, 5.0))


def render(quick: bool = False) -> Path:
    """Redraw hetero.md and hetero.png from the saved hetero.json."""
    return render_saved(VIEW, quick)
