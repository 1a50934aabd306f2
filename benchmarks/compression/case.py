"""What the ``compression`` benchmark measures: one model's epochs under a compression setting,
interleaved timing, accuracy, and the step peak in a fresh process."""
from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Optional

import dgl
import torch
import torch.nn.functional as F

from benchmarks import memory
from benchmarks.compression.settings import ACC_LAST
from dsgraph.compress import CompressionConfig, compressed, native
from dsgraph.models.registry import build_model


class Case:
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
        """One training epoch; returns time and saved bytes (per step, mean)."""
        model.train()
        saved, fp32, steps, pack_s, unpack_s, qbytes = 0, 0, 0, 0.0, 0.0, 0
        t0 = time.perf_counter()
        for graph, feats, target in self.batches():
            c = ctx()
            self.step(model, opt, c, graph, feats, target)
            st = getattr(c, "stats", None)
            if st is not None:
                saved += st.saved_bytes
                fp32 += st.fp32_bytes
                qbytes += st.quantized_bytes
                unpack_s += st.unpack_s
                pack_s += st.pack_s
            steps += 1
        return {"epoch_s": time.perf_counter() - t0, "saved_bytes": saved // steps,
                "quantized_bytes": qbytes // steps,
                "fp32_bytes": fp32 // steps, "pack_s": pack_s, "unpack_s": unpack_s}

    def step(self, model, opt, ctx: Any, graph, feats: torch.Tensor, target: torch.Tensor) -> None:
        """One training step (forward under ``ctx``, loss, backward, optimizer step)."""
        with ctx:
            logits = model(graph, feats)
        labels = self.y[target]  # target: output node ids (sampled) or the train mask (full)
        if self.mode == "full":
            logits = logits[target]
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def accuracy(self, model) -> float:
        """Test accuracy with full-neighbourhood inference."""
        model.eval()
        with torch.no_grad():
            pred = model(self.g, self.x).argmax(1)
        mask = self.g.ndata["test_mask"]
        return float((pred[mask] == self.y[mask]).float().mean())


def context(cfg: Optional[CompressionConfig]) -> Callable[[], Any]:
    """A setting's forward context, made afresh per step: ``cfg``'s compression, or for fp32
    (None) the same hooks measuring only."""
    if cfg is None:
        return lambda: compressed(CompressionConfig(enabled=True), measure_only=True)
    return lambda: compressed(cfg)


def timed_pairs(case: Case, cfg: CompressionConfig, pairs: int) -> tuple[dict, list[float], list[float]]:
    """Alternate fp32 and ``cfg`` epochs on one model; (first ``cfg`` epoch, cfg times, ratios).

    The order inside a pair alternates too, so a slow drift of the machine's load cancels.
    """
    model, opt = case.model()
    fp32, comp = context(None), context(cfg)
    first, times, fp_times, ratios = None, [], [], []
    for i in range(pairs):
        if i % 2 == 0:
            f = case.epoch(model, opt, fp32)
            r = case.epoch(model, opt, comp)
        else:
            r = case.epoch(model, opt, comp)
            f = case.epoch(model, opt, fp32)
        first = first or r
        times.append(r["epoch_s"])
        fp_times.append(f["epoch_s"])
        ratios.append(r["epoch_s"] / f["epoch_s"])
    assert first is not None
    return first, times + [-t for t in fp_times], ratios


def train_accuracy(case: Case, cfg: Optional[CompressionConfig], epochs: int) -> float:
    """Mean test accuracy over the last ``ACC_LAST`` of ``epochs`` full-graph epochs.

    The mean smooths the +-0.2-point epoch-to-epoch wobble of a converged model (dropout 0.5),
    which would otherwise be as large as the 0.5-point target.
    """
    model, opt = case.model()
    ctx = context(cfg)
    accs = []
    for e in range(epochs):
        case.epoch(model, opt, ctx)
        if e >= epochs - ACC_LAST:
            accs.append(case.accuracy(model))
    return sum(accs) / len(accs)


def step_peak(spec: dict) -> dict:
    """The fresh process of one setting's step peak (a :func:`benchmarks.memory.run_fresh`
    target).

    Loads the graph, builds the model, runs one warm-up step (allocator, DGL graph formats,
    lazily initialised optimizer state, library code), pages in the libraries' code, then for
    each batch: a span (:func:`benchmarks.memory.mark`), one training step, peak RSS minus RSS
    at the span's start. Returns the largest such growth (MiB) as ``peak_step_mb``; fp32 runs
    without any saved-tensor hooks, as stock training does.
    """
    g = dgl.load_graphs(spec["graph_file"])[0][0]
    case = Case(g, spec["model"], spec["mode"], spec["margs"], spec["batch"], spec["fanouts"],
                spec["max_batches"])
    cfg = CompressionConfig(**spec["cfg"]) if spec["cfg"] else None
    model, opt = case.model()
    batches = list(case.batches())  # sampled once: blocks are inputs, not the step's memory

    def ctx() -> Any:
        return compressed(cfg) if cfg is not None else contextlib.nullcontext()
    case.step(model, opt, ctx(), *batches[0])  # warm-up
    memory.page_in_libraries()
    peaks = []
    for batch in batches:
        start = memory.mark()
        case.step(model, opt, ctx(), *batch)
        peaks.append(start.peak_growth_mb())
    return {"peak_step_mb": max(peaks), "per_batch": peaks, "base_mb": start.rss_mb}


def measure_step_peak(case_args: dict, cfg: Optional[CompressionConfig], tmp: Path) -> float:
    """Run :func:`step_peak` for one setting in a fresh one-thread process; its MiB."""
    spec = {**case_args, "cfg": dataclasses.asdict(cfg) if cfg is not None else None}
    return memory.run_fresh("benchmarks.compression.case:step_peak", spec, tmp)["peak_step_mb"]


def torch_path_profile(case: Case, cfg: CompressionConfig) -> dict:
    """One epoch with the C kernels and one with the pure-torch codec: pack/unpack seconds."""
    out = {}
    for name, ctx in (("c_kernels", contextlib.nullcontext()), ("pure_torch", native.disabled())):
        model, opt = case.model()
        with ctx:
            case.epoch(model, opt, context(cfg))  # warm-up (allocator, lookup tables)
            r = case.epoch(model, opt, context(cfg))
        out[name] = {"pack_s": r["pack_s"], "unpack_s": r["unpack_s"], "epoch_s": r["epoch_s"]}
    return out
