"""Activation compression: saved bytes, step peak memory, epoch time and accuracy, fp32 vs INT2.

3-layer GraphSAGE, GCN and GAT (hidden 256) on the synthetic DC-SBM graph, full-graph and sampled
(one-process ``dgl.dataloading.DataLoader`` + ``NeighborSampler``): fp32, row-wise INT2 (EXACT)
and block-wise INT2 for several block sizes with uniform and variance-optimal levels. Saved bytes
are counted in the saved-tensor hooks (de-duplicated by storage); fp32 goes through the same hooks
in measure-only mode. Accuracy is trained only for the key settings (see ``ACC_SETTINGS``).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

import dgl
import torch
import torch.nn.functional as F

from benchmarks.harness import Report, median
from dsgraph.compress import CompressionConfig, compressed
from dsgraph.config import DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.models.registry import build_model

COLUMNS = ["model", "mode", "bits", "block_size", "levels", "saved_bytes", "ratio_vs_fp32",
           "ratio_vs_rowwise", "epoch_s", "time_overhead_vs_fp32", "peak_step_mb", "test_acc"]
MODELS = {"sage": {"hidden": 256}, "gcn": {"hidden": 256}, "gat": {"hidden": 64, "heads": 4}}


def _settings(blocks: list[int], optimal: list[int]) -> list[tuple[str, Optional[CompressionConfig]]]:
    """(label, config) pairs: fp32 (None), row-wise INT2, block INT2 uniform per G, optimal levels."""
    out: list[tuple[str, Optional[CompressionConfig]]] = [("fp32", None)]
    out.append(("row", CompressionConfig(enabled=True, granularity="row")))
    for g in blocks:
        out.append((f"block{g}-uniform", CompressionConfig(enabled=True, block_size=g)))
    for g in optimal:
        out.append((f"block{g}-optimal", CompressionConfig(enabled=True, block_size=g, levels="optimal")))
    return out


# Settings trained for accuracy (full-graph mode only), per model: training every setting of the
# sweep would take hours on 2 cores.
ACC_SETTINGS = {"sage": ("fp32", "row", "block256-uniform", "block256-optimal"),
                "gcn": ("fp32", "block256-uniform"),
                "gat": ("fp32", "block256-uniform")}


def _rss_reset() -> Optional[float]:
    """Reset this process's peak RSS (Linux clear_refs) and return the current RSS in MB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_mb("VmRSS")
    except OSError:
        return None


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _Case:
    """One model trained on one graph in one mode; runs steps under a compression setting."""

    def __init__(self, g: dgl.DGLGraph, name: str, mode: str, hidden_args: dict, batch: int,
                 fanouts: list[int], max_batches: int) -> None:
        self.g, self.name, self.mode = g, name, mode
        self.x, self.y = g.ndata["feat"], g.ndata["label"]
        self.train_ids = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
        self.args = dict(hidden_args, num_layers=3, dropout=0.5)
        self.batch, self.fanouts, self.max_batches = batch, fanouts, max_batches
        self.classes = int(self.y.max()) + 1

    def model(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """A fresh model (same init for every setting) and its optimizer."""
        torch.manual_seed(0)
        m = build_model(self.name, self.x.shape[1], self.classes, self.args)
        return m, torch.optim.Adam(m.parameters(), lr=0.01)

    def batches(self):
        """The forward inputs of one epoch: the whole graph, or sampled blocks."""
        if self.mode == "full":
            yield self.g, self.x, self.g.ndata["train_mask"]
            return
        sampler = dgl.dataloading.NeighborSampler(self.fanouts)
        gen = torch.Generator().manual_seed(0)
        perm = self.train_ids[torch.randperm(self.train_ids.numel(), generator=gen)]
        loader = dgl.dataloading.DataLoader(self.g, perm, sampler, batch_size=self.batch,
                                            shuffle=False)
        for i, (inp, out, blocks) in enumerate(loader):
            if i == self.max_batches:
                break
            yield blocks, self.x[inp], out

    def epoch(self, model, opt, ctx: Callable[[], Any]) -> dict:
        """One training epoch; returns time, bytes (per step, mean) and step peak memory."""
        model.train()
        saved, fp32, steps, peaks, pack_s, unpack_s = 0, 0, 0, [], 0.0, 0.0
        t0 = time.perf_counter()
        for graph, feats, target in self.batches():
            base = _rss_reset()
            c = ctx()
            with c:
                logits = model(graph, feats)
            labels = self.y[target]  # target: output node ids (sampled) or the train mask (full)
            if self.mode == "full":
                logits = logits[target]
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if base is not None:
                peaks.append(_status_mb("VmHWM") - base)
            st = getattr(c, "stats", None)
            if st is not None:
                saved += st.saved_bytes
                fp32 += st.fp32_bytes
                unpack_s += st.unpack_s
                pack_s += st.pack_s
            steps += 1
        return {"epoch_s": time.perf_counter() - t0, "saved_bytes": saved // steps,
                "fp32_bytes": fp32 // steps, "peak_step_mb": max(peaks) if peaks else None,
                "pack_s": pack_s, "unpack_s": unpack_s}

    def accuracy(self, model) -> float:
        """Test accuracy with full-neighbourhood inference."""
        model.eval()
        with torch.no_grad():
            pred = model(self.g, self.x).argmax(1)
        mask = self.g.ndata["test_mask"]
        return float((pred[mask] == self.y[mask]).float().mean())


def _context(cfg: Optional[CompressionConfig]) -> Callable[[], Any]:
    if cfg is None:
        return lambda: compressed(CompressionConfig(enabled=True), measure_only=True)
    return lambda: compressed(cfg)


def run(quick: bool) -> Any:
    """Sweep models x modes x settings; write benchmarks/reports/compression.*."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    if quick:
        data = DatasetConfig(num_nodes=2000, feat_dim=16, num_classes=4)
        blocks, optimal, timing_epochs, acc_epochs = [64, 256], [256], 1, 2
        models = {"sage": {"hidden": 16}, "gcn": {"hidden": 16}, "gat": {"hidden": 4, "heads": 4}}
        batch, fanouts, max_batches = 256, [3, 3, 3], 2
    else:
        data = DatasetConfig(num_nodes=100_000)
        blocks, optimal, timing_epochs, acc_epochs = [64, 128, 256, 512, 1024], [256], 1, 20
        models, batch, fanouts, max_batches = MODELS, 2048, [5, 5, 5], 3
    report = Report("compression", quick, COLUMNS, repeats=timing_epochs,
                    title="Activation compression (saved-tensor hooks): fp32 vs row-wise vs block INT2")
    t_start = time.perf_counter()
    g = generate(data)
    report.extra["graph"] = {"num_nodes": g.num_nodes(), "num_edges": g.num_edges(),
                             "feat_dim": data.feat_dim, "classes": data.num_classes}
    settings = _settings(blocks, optimal)
    report.extra["settings"] = {"acc_epochs_full_graph": acc_epochs, "batch_size": batch,
                                "fanouts": fanouts, "sampled_batches_per_epoch": max_batches,
                                "timed_epochs": timing_epochs}
    for name, margs in models.items():
        for mode in ("full", "sampled"):
            case = _Case(g, name, mode, margs, batch, fanouts, max_batches)
            base: dict[str, Any] = {}
            model, opt = case.model()
            case.epoch(model, opt, _context(None))  # warm-up once (allocator, DGL graph formats)
            for label, cfg in settings:
                model, opt = case.model()
                ctx = _context(cfg)
                runs = [case.epoch(model, opt, ctx) for _ in range(timing_epochs)]
                r = runs[-1]
                epoch_s = median(x["epoch_s"] for x in runs)
                acc = None
                if mode == "full" and label in ACC_SETTINGS.get(name, ACC_SETTINGS["sage"]):
                    model, opt = case.model()
                    for _ in range(acc_epochs):
                        case.epoch(model, opt, ctx)
                    acc = case.accuracy(model)
                if label == "fp32":
                    base = {"bytes": r["saved_bytes"], "epoch_s": epoch_s, "acc": acc}
                if label == "row":
                    base["row_bytes"] = r["saved_bytes"]
                rec = {"model": name, "mode": mode, "bits": 32 if cfg is None else cfg.bits,
                       "block_size": None if cfg is None else (0 if cfg.granularity == "row" else cfg.block_size),
                       "levels": None if cfg is None else cfg.levels,
                       "saved_bytes": r["saved_bytes"],
                       "ratio_vs_fp32": base["bytes"] / r["saved_bytes"],
                       "ratio_vs_rowwise": (r["saved_bytes"] / base["row_bytes"]) if "row_bytes" in base else None,
                       "epoch_s": epoch_s, "time_overhead_vs_fp32": epoch_s / base["epoch_s"] - 1,
                       "peak_step_mb": r["peak_step_mb"], "test_acc": acc,
                       "pack_s_per_epoch": r["pack_s"], "unpack_s_per_epoch": r["unpack_s"],
                       "acc_epochs": acc_epochs if acc is not None else None,
                       "loadavg_1m": os.getloadavg()[0]}
                report.add(rec)
            # Save as we go so an interrupted full run still leaves its finished part on disk.
            report.extra["wall_s"] = time.perf_counter() - t_start
            report.extra["complete"] = False
            report.save()
    report.extra["wall_s"] = time.perf_counter() - t_start
    report.extra["complete"] = True
    _notes(report)
    return report.save(plot=_plot)


def _notes(report: Report) -> None:
    """Targets (G=256 block INT2 vs fp32 / row-wise / accuracy / time) and caveats."""
    recs = report.records
    lines = ["**Targets** (block INT2, G=256, uniform levels):", ""]
    for r in recs:
        if r["block_size"] != 256 or r["levels"] != "uniform":
            continue
        fp = next(x for x in recs if x["model"] == r["model"] and x["mode"] == r["mode"] and x["bits"] == 32)
        acc = (f"acc {r['test_acc']:.4f} vs fp32 {fp['test_acc']:.4f} "
               f"({'ok' if abs(r['test_acc'] - fp['test_acc']) <= 0.005 else 'MISSED'})"
               if r["test_acc"] is not None and fp["test_acc"] is not None else "acc not trained")
        lines.append(f"- {r['model']}/{r['mode']}: {r['ratio_vs_fp32']:.2f}x fewer bytes than fp32 "
                     f"({'ok' if r['ratio_vs_fp32'] >= 12 else 'MISSED'} >= 12x); "
                     f"{r['ratio_vs_rowwise']:.3f} of row-wise "
                     f"({'ok' if r['ratio_vs_rowwise'] <= 0.85 else 'MISSED'} <= 0.85); {acc}; "
                     f"epoch overhead {100 * r['time_overhead_vs_fp32']:+.0f}% "
                     f"({'ok' if r['time_overhead_vs_fp32'] <= 0.25 else 'MISSED'} <= 25%)")
    report.note("\n".join(lines))
    prof = ["**Profile** (block INT2, G=256: seconds per epoch in the pack / unpack hooks, "
            "against the fp32 epoch):", ""]
    for r in recs:
        if r["block_size"] == 256 and r["levels"] == "uniform":
            fp = next(x for x in recs if x["model"] == r["model"] and x["mode"] == r["mode"] and x["bits"] == 32)
            prof.append(f"- {r['model']}/{r['mode']}: pack {r['pack_s_per_epoch']:.2f} s + unpack "
                        f"{r['unpack_s_per_epoch']:.2f} s; epoch {r['epoch_s']:.2f} s vs fp32 {fp['epoch_s']:.2f} s")
    report.note("\n".join(prof))
    report.note("`ratio_vs_fp32` = fp32 saved bytes / saved bytes (x-fold reduction); "
                "`ratio_vs_rowwise` = saved bytes / row-wise INT2 saved bytes (lower is better); "
                "`bits` 32 = fp32 baseline (same hooks, measure-only). Sampled rows give the mean "
                "saved bytes per step. `peak_step_mb` = peak RSS growth during the largest step "
                "(Linux clear_refs/VmHWM), including gradients and temporaries. `test_acc` is "
                "trained in full-graph mode only, for the settings in `ACC_SETTINGS` and `acc_epochs` "
                "epochs (short: to keep the run within ~30 minutes on 2 cores), other rows are null; "
                "sampled epochs are `sampled_batches_per_epoch` batches. Optimal (non-uniform) levels "
                "store exactly the bytes of uniform ones at the same G, so only G=256 is swept. "
                "Timings are medians of `repeats` epochs on a shared 2-core machine "
                "(`loadavg_1m` records the load); treat small overheads as noise.")


def _plot(records: list[dict], fig) -> None:
    """Bytes reduction vs fp32 and epoch-time overhead per setting (full-graph mode)."""
    ax1, ax2 = fig.subplots(1, 2)
    labels = []
    for r in records:
        lab = "fp32" if r["bits"] == 32 else ("row" if r["block_size"] == 0 else
                                             f"G{r['block_size']}{'o' if r['levels'] == 'optimal' else ''}")
        if lab not in labels:
            labels.append(lab)
    width = 0.8 / 6
    for i, (model, mode) in enumerate([(m, md) for m in ("sage", "gcn", "gat") for md in ("full", "sampled")]):
        rs = {("fp32" if r["bits"] == 32 else ("row" if r["block_size"] == 0 else
               f"G{r['block_size']}{'o' if r['levels'] == 'optimal' else ''}")): r
              for r in records if r["model"] == model and r["mode"] == mode}
        if not rs:
            continue
        xs = [j + i * width for j in range(len(labels))]
        ax1.bar(xs, [rs[lab]["ratio_vs_fp32"] if lab in rs else 0 for lab in labels], width, label=f"{model}/{mode}")
        ax2.bar(xs, [100 * rs[lab]["time_overhead_vs_fp32"] if lab in rs else 0 for lab in labels], width)
    for ax, title in ((ax1, "saved bytes: x fewer than fp32"), (ax2, "epoch time overhead vs fp32 (%)")):
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=45)
        ax.set_title(title)
    ax1.axhline(12, color="k", lw=0.5, ls="--")
    ax2.axhline(25, color="k", lw=0.5, ls="--")
    ax1.legend(fontsize=7)
