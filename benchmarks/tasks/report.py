"""The ``tasks`` report: table columns, the comparisons against the issue's targets, the figure,
and redrawing from the saved tasks.json."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Optional

from benchmarks.harness import View, bars, render_saved

# the node and edge tasks' headline test figures
SCORES = ("test_rmse", "test_mae", "test_r2", "test_rocauc", "test_acc", "test_macro_f1")
COLUMNS = ("setting", "task", "system", "hosts", "parts", "trainers", "link", "runs",
           "edges_per_s", "edges_per_s_min", "edges_per_s_max", "ratio_vs_stock", "mrr",
           "mrr_min", "mrr_max", "hits_at_k", "hits_k", *SCORES,
           *(f"{k}_{end}" for k in ("test_rmse", "test_rocauc", "test_acc") for end in ("min", "max")),
           "job_memory_mb", "load1", "wall_s")
KEY = ("setting",)
TITLE = ("Tasks: link prediction vs stock DistDGL, what each task's options cost, and each "
         "node and edge task against a features-only model")


def _find(rows: list[dict], text: str) -> Optional[dict]:
    """The first row whose setting contains ``text``."""
    return next((r for r in rows if text in r["setting"]), None)


def _vs_stock(rows: list[dict], link: str, target: float) -> Optional[str]:
    """dsgraph's link-prediction rows over ``link`` against stock's: edges/s ratio, MRR."""
    stock = next((r for r in rows if r["system"] == "stock" and r["link"] == link), None)
    ours = [r for r in rows if r["system"] == "dsgraph" and r["link"] == link]
    if stock is None or not ours:
        return None
    parts = [f"{r['setting']}: **{r['ratio_vs_stock']:.2f}x** ({r['edges_per_s']:,.0f} vs "
             f"{stock['edges_per_s']:,.0f} edges/s; test MRR {r['mrr']:.3f} vs "
             f"{stock['mrr']:.3f})" for r in ours if r.get("ratio_vs_stock")]
    return (f"**{link}** vs {stock['setting']} (target >= {target}x, MRR within 0.01): "
            + "; ".join(parts) + ".")


def _difference(rows: list[dict], key: str, a: str, b: str, what: str) -> Optional[str]:
    """``what``: row ``a``'s ``key`` minus row ``b``'s."""
    ra, rb = _find(rows, a), _find(rows, b)
    if ra is None or rb is None or ra.get(key) is None or rb.get(key) is None:
        return None
    return (f"{what}: {ra[key]:.4f} vs {rb[key]:.4f} ({ra[key] - rb[key]:+.4f}; "
            f"{ra['setting']} vs {rb['setting']}).")


def _notes(payload: dict) -> list[str]:
    """Each target of the issue against this run's rows."""
    rows = payload["records"]
    notes = [_vs_stock(rows, "veth", 1.3), _vs_stock(rows, "veth_throttled", 1.3),
             _difference(rows, "mrr", "2 parts x 1 trainer", "(whole graph)",
                         "2 partitions vs one process on the whole graph, test MRR "
                         "(target within 0.01)"),
             _difference(rows, "mrr", "2 parts x 1 trainer", "MLP",
                         "GNN vs feature-only model, test MRR (target >= +0.10)"),
             _difference(rows, "mrr", "INT2", "2 parts x 1 trainer",
                         "INT2 activations, test MRR (target >= -0.005)"),
             _difference(rows, "test_rocauc", "multilabel SAGE, INT2", "multilabel SAGE",
                         "INT2 activations, multilabel test ROC-AUC (target >= -0.005)"),
             _difference(rows, "test_rocauc", "multilabel SAGE", "multilabel MLP",
                         "multilabel: GNN vs feature-only model, test ROC-AUC"),
             _difference(rows, "test_rmse", "node regression SAGE", "node regression MLP",
                         "node regression: GNN vs feature-only model, test RMSE (lower is "
                         "better)"),
             _difference(rows, "test_acc", "edge classification SAGE",
                         "edge classification MLP",
                         "edge classification: GNN vs feature-only model, test accuracy"),
             _difference(rows, "test_macro_f1", "edge classification SAGE",
                         "edge classification MLP",
                         "edge classification: GNN vs feature-only model, test macro F1"),
             _difference(rows, "test_rmse", "edge regression SAGE", "edge regression MLP",
                         "edge regression: GNN vs feature-only model, test RMSE (lower is "
                         "better)"),
             _difference(rows, "test_r2", "edge regression SAGE", "edge regression MLP",
                         "edge regression: GNN vs feature-only model, test R²")]
    notes += [f"**{link}** rows skipped: {why}."
              for link, why in payload.get("skipped", {}).items()]
    return [n for n in notes if n]


def _plot(rows: list[dict], fig: Any) -> None:
    """Per row: training edges/s (link prediction, with the repeats' range), the test figure
    (MRR, ROC-AUC or RMSE) and the job's memory."""
    ax1, ax2, ax3 = fig.subplots(1, 3, sharey=True)
    ys = [-i for i in range(len(rows))]  # the first row on top, as in the table
    timed = [(y, r) for y, r in zip(ys, rows) if r.get("edges_per_s")]
    bars(ax1, [y for y, _ in timed], [r for _, r in timed], "edges_per_s", KEY, horizontal=True,
         color=["tab:gray" if r["system"] == "stock" else "tab:blue" for _, r in timed])
    for y, r in timed:
        ax1.plot([r["edges_per_s_min"], r["edges_per_s_max"]], [y, y], color="k", lw=1)
    ax1.set_xlabel("training edges / s\n(median, range of repeats; grey: stock)")
    ax1.set_yticks(ys, [textwrap.fill(r["setting"], 34) for r in rows], fontsize=7)
    for key, colour in (("mrr", "tab:green"), ("test_rocauc", "tab:olive"),
                        ("test_acc", "tab:cyan"), ("test_rmse", "tab:red")):
        scored = [(y, r) for y, r in zip(ys, rows) if r.get(key) is not None]
        if scored:
            bars(ax2, [y for y, _ in scored], [r for _, r in scored], key, KEY, horizontal=True,
                 color=colour)
    ax2.set_xlabel("test MRR (green), ROC-AUC (olive), accuracy (cyan),\nRMSE (red, lower "
                   "is better)")
    bars(ax3, ys, rows, "job_memory_mb", KEY, horizontal=True, color="tab:purple")
    ax3.set_xlabel("job memory, MiB\n(peak summed PSS)")


VIEW = View("tasks", TITLE, COLUMNS, KEY, plot=_plot, notes=_notes, figsize=(15.0, 8.0))


def render(quick: bool = False) -> Path:
    """Redraw tasks.md and tasks.png from the saved tasks.json."""
    return render_saved(VIEW, quick)
