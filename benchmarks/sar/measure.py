"""What the ``sar`` benchmark measures in a process: the SAR workers' hook, the plain DGL run
(a fresh process of its own), and first-step gradients against single-process DGL."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dgl
import torch
import torch.nn.functional as F

from benchmarks import memory
from benchmarks.sar.settings import GRADS_FILE, LR, MODELS, SEED
from dsgraph import dist
from dsgraph.checkpoint import seed_everything
from dsgraph.models.registry import build_model
from dsgraph.trainer import Hook, Trainer


class MeasureHook(Hook):
    """What the benchmark reads from a SAR worker beyond the trainer's own summary.

    ``on_ready``: the end of loading (:func:`benchmarks.memory.mark` with the libraries paged
    in). ``on_epoch`` (with ``grads``): rank 0 saves the summed gradients of the first step to
    ``RUN/first_grads.pt``. ``on_end``: ``bench_workers`` in metrics.json, per rank: RSS after
    loading, activation MB and file-backed RSS growth.
    """

    def __init__(self, grads: bool = False) -> None:
        self.grads = grads
        self.loaded = memory.Mark(0.0, 0.0)

    def on_ready(self, trainer: Trainer) -> None:
        self.loaded = memory.mark(page_in=True)

    def on_epoch(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if self.grads and record["epoch"] == 1 and trainer.rank == 0:
            torch.save({n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()},
                       trainer.run_dir / GRADS_FILE)

    def on_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        summary["bench_workers"] = dist.gather_values(
            {"rss_loaded_mb": trainer.loaded_rss_mb,
             "act_mb": self.loaded.peak_mb() - trainer.loaded_rss_mb,
             "rss_file_growth_mb": self.loaded.file_growth_mb()})


def measure() -> Hook:
    """``--hook benchmarks.sar.measure:measure``: the memory measurement."""
    return MeasureHook()


def measure_grads() -> Hook:
    """``--hook benchmarks.sar.measure:measure_grads``: the memory measurement and first-step
    gradients."""
    return MeasureHook(grads=True)


def loss_of(model, graph, x, label, train, n_train):
    """The SAR strategy's loss: cross-entropy summed over labelled nodes / their global count."""
    out = model(graph, x)
    return F.cross_entropy(out[train], label[train], reduction="sum") / n_train, out


def build(model: str, in_feats: int, num_classes: int, dtype: str) -> torch.nn.Module:
    """The model as the trainer builds it (after seeding, which the caller does): built, then
    cast to ``dtype``."""
    return build_model(model, in_feats, num_classes, MODELS[model]).to(getattr(torch, dtype))


def dgl_baseline(spec: dict) -> dict:
    """The plain single-process DGL run (``mode: dgl``; a :func:`benchmarks.memory.run_fresh`
    target): load the whole graph, train, return the figures (and write ``first_grads.pt`` into
    ``spec['out']`` with ``spec['grads']``)."""
    seed_everything(SEED)  # as the trainer: seed, load, build
    graph = dgl.load_graphs(spec["graph_file"])[0][0]
    graph.create_formats_()
    dtype = getattr(torch, spec["dtype"])
    x, label = graph.ndata["feat"].to(dtype), graph.ndata["label"].long()
    train, val = graph.ndata["train_mask"].bool(), graph.ndata["val_mask"].bool()
    n_train, n_val = float(train.sum()), float(val.sum())
    model = build(spec["model"], x.shape[1], int(label.max()) + 1, spec["dtype"])
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loaded = memory.mark(page_in=True)
    times, accs = [], []
    for epoch in range(1, spec["epochs"] + 1):
        model.train()
        t0 = time.perf_counter()
        loss, logits = loss_of(model, graph, x, label, train, n_train)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        del logits, loss
        times.append(time.perf_counter() - t0)
        if epoch == 1 and spec.get("grads"):
            torch.save({n: p.grad.detach().clone() for n, p in model.named_parameters()},
                       Path(spec["out"]) / GRADS_FILE)
        model.eval()
        with torch.no_grad():
            pred = model(graph, x).argmax(1)
        accs.append(float((pred[val] == label[val]).sum()) / max(n_val, 1.0))
        del pred
    act = loaded.peak_growth_mb()
    return {"act_mb": act, "peak_mb": act + loaded.rss_mb, "rss_loaded_mb": loaded.rss_mb,
            "rss_file_growth_mb": loaded.file_growth_mb(), "act_per_worker": [act],
            "epoch_s": times, "bytes_sent": [0] * len(times), "val_acc": accs}


def reference_grads(gfile: Path, model: str) -> dict[str, dict]:
    """First-step gradients of single-process DGL on the whole graph, in this process."""
    g = dgl.load_graphs(str(gfile))[0][0]
    tr, label = g.ndata["train_mask"].bool(), g.ndata["label"].long()
    out = {}
    for dt in ("float64", "float32"):
        seed_everything(SEED)
        m = build(model, g.ndata["feat"].shape[1], int(label.max()) + 1, dt)
        loss, _ = loss_of(m, g, g.ndata["feat"].to(getattr(torch, dt)), label, tr,
                          float(tr.sum()))
        loss.backward()
        out[dt] = {n: p.grad for n, p in m.named_parameters()}
    return out


def grad_err(got: dict, ref: dict) -> float:
    """max over parameters of max|got - ref| / max|ref|."""
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    errs = [0.0]
    for k, r in ref.items():
        scale, diff = r.abs().max().item(), (got[k] - r).abs().max().item()
        errs.append(diff / scale if scale > 0 else diff)
    return max(errs)
