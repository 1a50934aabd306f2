"""The ``compression`` report: table rows, the column legend, the figure, and redrawing from the
saved compression.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness import View, bars, render_saved

COLUMNS = ("model", "mode", "setting", "bits", "block_size", "levels", "projection", "saved_bytes",
           "ratio_vs_fp32", "ratio_vs_rowwise", "epoch_s", "time_overhead_vs_fp32", "peak_step_mb",
           "test_acc")
# Every setting that tells two records apart: plain and projected records share bits, G and
# levels, so a figure keyed without ``projection`` draws one over the other.
KEY = ("model", "mode", "bits", "block_size", "levels", "projection")
TITLE = "Activation compression (saved-tensor hooks): fp32 vs row-wise vs block INT2"


def _legend(payload: dict) -> list[str]:
    """What each column means and how it is measured (the peak as this report's run took it)."""
    return [
        "`ratio_vs_fp32` = fp32 saved bytes / saved bytes (x-fold reduction); "
        "`ratio_vs_rowwise` = saved bytes / row-wise INT2 saved bytes at the same "
        "`projection` (lower is better); `bits` 32 = fp32 baseline (same hooks, "
        "measure-only). Sampled rows give the mean saved bytes per step. " + _peak_note(payload) + " "
        "`time_overhead_vs_fp32` = median over interleaved "
        "(fp32, setting) epoch pairs of the time ratio, minus 1 (`timing_pairs` pairs; "
        "`epoch_s` is the median setting epoch, for fp32 the median of all its interleaved "
        "epochs); sampled epochs are `sampled_batches_per_epoch` batches including "
        "sampling. Timings run one thread (as dsgraph's workers do; `threads` in the json),"
        " and while compressing, ReLU and dropout run as fused ops saving 1-bit masks "
        "(dsgraph/compress/masked_ops.py) where the fp32 baseline runs torch's own. "
        "`test_acc` is full-graph training of the settings in `ACC_SETTINGS` for "
        "`acc_epochs` epochs on a graph of `acc_graph_nodes` nodes from the same generator "
        "(to the plateau; the 100k-node graph would need hours), averaged over the last 5 "
        "epochs; other rows are null. Optimal (non-uniform) levels store exactly the bytes "
        "of uniform ones at the same G, so only G=256 is swept. `quantized_bytes` (json) = "
        "bytes of the INT-b packs alone, `quantized_ratio_vs_rowwise` its ratio to "
        "row-wise. " + _old_peak_caveat(payload) +
        "`setting` (table and figure) names the record by every field that sets it apart: "
        "fp32, row (row-wise INT2), G<n> (flat blocks of n values), opt (variance-optimal "
        "levels), +RP/8 (random projection keeping 1/8 of the columns)."]


def _fresh_peak(payload: dict) -> bool:
    """Whether the report's ``peak_step_mb`` was measured in fresh processes (runs after the
    change record it in their settings; earlier reports measured inside the sweep)."""
    return payload.get("settings", {}).get("step_peak") == "fresh process per setting"


def _peak_note(payload: dict) -> str:
    if not _fresh_peak(payload):
        return ("`peak_step_mb` = peak RSS growth during the largest step (Linux "
                "clear_refs/VmHWM), including gradients and temporaries.")
    return ("`peak_step_mb` = the real peak of a training step (settings in `PEAK_SETTINGS`, "
            "other rows null): a fresh one-thread process per setting runs a warm-up step, then "
            "per batch resets its peak RSS (Linux clear_refs/VmHWM) and takes peak minus RSS "
            "before the step (forward, backward with decoded saves, gradients and temporaries, "
            "optimizer step), the largest over the batches; allocations >= 64 KiB are "
            "mmap-served so freed tensors leave RSS; fp32 runs without saved-tensor hooks.")


def _old_peak_caveat(payload: dict) -> str:
    if _fresh_peak(payload):
        return ""
    return ("`peak_step_mb` is only indicative: RSS growth misses memory the allocator kept "
            "from earlier steps (hence values near 0 and repeated values). ")


def setting_label(r: dict) -> str:
    """A record's setting in words, from every field of ``KEY`` after model and mode."""
    if r["bits"] == 32:
        return "fp32"
    label = "row" if r["block_size"] == 0 else f"G{r['block_size']}"
    if r["bits"] != 2:
        label += f" INT{r['bits']}"
    if r["levels"] not in (None, "uniform"):
        label += " opt" if r["levels"] == "optimal" else f" {r['levels']}"
    if r["projection"] not in (None, 1.0):
        label += f"+RP/{1 / r['projection']:g}"
    return label


def table_rows(records: list[dict]) -> list[dict]:
    """The table rows (and what the figure draws): each record with its ``setting`` label."""
    return [{**r, "setting": setting_label(r)} for r in records]


def _plot(rows: list[dict], fig: Any) -> None:
    """Saved-bytes reduction and epoch-time overhead vs fp32, one bar per row: x = setting,
    colour = model (dark: full graph, light: sampled)."""
    from matplotlib import colormaps
    from matplotlib.ticker import PercentFormatter

    labels = list(dict.fromkeys(r["setting"] for r in rows))
    groups = list(dict.fromkeys((r["model"], r["mode"]) for r in rows))
    models = list(dict.fromkeys(m for m, _ in groups))
    width = 0.8 / max(len(groups), 1)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for i, (model, mode) in enumerate(groups):
        rs = [r for r in rows if (r["model"], r["mode"]) == (model, mode)]
        xs = [labels.index(r["setting"]) + (i - (len(groups) - 1) / 2) * width for r in rs]
        colour = colormaps["tab20"](2 * models.index(model) + (mode != "full"))
        for ax, column in ((ax1, "ratio_vs_fp32"), (ax2, "time_overhead_vs_fp32")):
            bars(ax, xs, rs, column, KEY, width=width, color=colour, label=f"{model} / {mode}")
    ax1.axhline(12, color="k", lw=0.6, ls="--", label="target 12x (G=256)")
    limit = ax2.axhline(0.25, color="k", lw=0.6, ls="--", label="limit +25% (G=256)")
    ax2.axhline(0, color="k", lw=0.4)
    ax1.set_ylabel("fp32 saved bytes / saved bytes (x)")
    ax1.set_title("saved activation bytes: x-fold reduction vs fp32 (higher is better)")
    ax2.set_ylabel("epoch time vs fp32")
    ax2.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax2.set_title("epoch time overhead vs fp32 (median of interleaved pairs; lower is better)")
    ax2.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax2.set_xlabel("setting (row = row-wise INT2, G<n> = blocks of n, opt = optimal levels, "
                   "+RP/8 = random projection)")
    ax1.legend(fontsize=7, ncol=2, loc="upper left")
    ax2.legend(handles=[limit], fontsize=7, loc="upper left")
    for ax in (ax1, ax2):
        ax.grid(axis="y", lw=0.3)


VIEW = View("compression", TITLE, COLUMNS, KEY, rows=table_rows, plot=_plot, notes=_legend,
            figsize=(12.0, 8.0))


def render(quick: bool = False) -> Path:
    """Redraw compression.md and compression.png from the saved compression.json."""
    return render_saved(VIEW, quick)
