"""The ``sar`` report: table columns, the figure, and redrawing from the saved sar.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from benchmarks.harness import View, line, render_saved, tag
from benchmarks.sar.settings import SAR_CHUNK

# No accuracy column: every run trains EPOCHS (3) epochs, which measure memory and time but say
# nothing about accuracy (final_val_acc stays in sar.json).
COLUMNS = ("graph", "mode", "model", "workers", "chunk_rows", "peak_act_mb", "act_ratio",
           "peak_rss_mb", "bytes_sent", "epoch_s", "max_grad_rel_err", "max_grad_rel_err_fp32")
KEY = ("graph", "mode", "model", "workers", "chunk_rows")
TITLE = "SAR full-batch training: memory per worker, traffic, exactness"
MODES = ("sar", "sa", "one_shot")
MODE_NAMES = {"sar": "SAR", "sa": "SA", "one_shot": "one-shot"}
MODEL_COLOURS = {"sage": "tab:blue", "gat": "tab:orange"}


def _plain_dgl(rows: list[dict], graph: str, model: str) -> Optional[dict]:
    """The plain DGL row of ``graph`` and ``model``."""
    return next((r for r in rows if (r["graph"], r["model"], r["mode"]) == (graph, model, "dgl")),
                None)


def _plot(rows: list[dict], fig: Any) -> None:
    """Peak activation MB per worker against workers: one row of panels per graph, one panel
    per mode, one colour per model; plain DGL as a dashed line in its model's colour."""
    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    axes = fig.subplots(len(graphs), len(modes), sharey="row", squeeze=False)
    workers = sorted({r["workers"] for r in rows})
    models = list(dict.fromkeys(r["model"] for r in rows))
    for gi, g in enumerate(graphs):
        for mi, mode in enumerate(modes):
            ax = axes[gi][mi]
            for model in models:
                colour = MODEL_COLOURS.get(model)
                base = _plain_dgl(rows, g, model)
                if base:
                    tag(ax.axhline(base["peak_act_mb"], color=colour, ls="--", lw=1,
                                   label=f"{model}: plain DGL (1 process)"),
                        "peak_act_mb", [base], KEY)
                same = [r for r in rows if (r["graph"], r["model"], r["mode"]) == (g, model, mode)]
                line(ax, sorted((r for r in same if not r.get("chunk_rows")),
                                key=lambda r: r["workers"]),
                     "workers", "peak_act_mb", KEY, "-o", color=colour,
                     label=f"{model}: dsgraph, N workers")
                chunked = [r for r in same if r.get("chunk_rows")]
                line(ax, chunked, "workers", "peak_act_mb", KEY, "*", color=colour, ms=10,
                     label=f"{model}: chunk_rows {SAR_CHUNK}" if chunked else None)
            ax.set_title(f"{g} graph, {MODE_NAMES[mode]}")
            ax.set_xticks(workers)
            # Head-room above the highest point so the legend covers no line.
            ax.set_ylim(0, 1.6 * max(r["peak_act_mb"] for r in rows if r["graph"] == g))
            ax.grid(lw=0.3)
            if gi == len(graphs) - 1:
                ax.set_xlabel("workers N")
            if mi == 0:
                ax.set_ylabel("peak activation MB\n(largest worker)")
    axes[0][-1].legend(fontsize=7, loc="upper right")


VIEW = View("sar", TITLE, COLUMNS, KEY, plot=_plot, figsize=(12.0, 7.0))


def render(quick: bool = False) -> Path:
    """Redraw sar.md and sar.png from the saved sar.json."""
    return render_saved(VIEW, quick)
