"""Full-batch distributed training with SAR (``train.mode: sar``).

``launch`` (in the ``python -m train`` process) starts one gloo worker per partition; each
worker runs this module as ``python -m train.fullbatch --run-dir RUN``, loads its partition,
and trains the whole graph every epoch with Adam: loss normalised by the global number of
labelled nodes, gradients summed over workers, so every worker holds identical parameters.
``sar.mode`` picks sar / sa / one_shot aggregation. Rank 0 writes metrics and checkpoints.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dsgraph.config import Config
from dsgraph.errors import DataError, UserError


def part_config_path(cfg: Config) -> Path:
    """The partition JSON of the run; its part count must equal ``partition.num_parts``."""
    path = Path(cfg.partition.out_dir) / f"{cfg.partition.graph_name}.json"
    if not path.is_file():
        raise UserError(f"{path}: partition files not found; run `python -m partition --config "
                        f"{cfg.source}` first")
    try:
        parts = int(json.loads(path.read_text())["num_parts"])
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{path}: not a DGL partition JSON (no num_parts)") from None
    if parts != cfg.partition.num_parts:
        raise UserError(f"{path}: holds {parts} parts but partition.num_parts is "
                        f"{cfg.partition.num_parts}; re-run `python -m partition --config "
                        f"{cfg.source}`")
    return path


def launch(cfg: Config, run_dir: Path, resume: bool) -> None:
    """Run ``partition.num_parts`` SAR workers under the supervisor; print the summary."""
    from dsgraph.cluster.launch import run_workers
    from dsgraph.fsutil import atomic_write_text
    from dsgraph.metrics_report import print_summary

    from dsgraph.models.registry import build_model
    from dsgraph.sar.model import check_model

    part_config_path(cfg)
    # Fail fast, in this process, on model arguments or layers SAR cannot run (dims don't matter).
    check_model(build_model(cfg.model.name, 4, 2, cfg.model.args))
    t0 = time.perf_counter()
    run_workers(run_dir, "train.fullbatch", cfg.partition.num_parts, cfg.cluster)
    summary_path = Path(run_dir) / "metrics.json"
    summary = json.loads(summary_path.read_text())
    summary["wall_s"] = time.perf_counter() - t0
    atomic_write_text(summary_path, json.dumps(summary, indent=1))
    print_summary(run_dir)


# --- worker process ----------------------------------------------------------------------------

def _allsum(values: list[float]) -> list[float]:
    import torch.distributed as dist
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def worker_main(run_dir: Path) -> None:
    """One SAR worker: load its partition, train train.epochs full-batch epochs."""
    import torch.distributed as dist
    import torch.nn.functional as F

    from dsgraph.cluster.worker import init_gloo
    from dsgraph.models.registry import build_model
    from dsgraph.compress import compression_context
    from dsgraph.runs import (MetricsLog, end_epoch, epoch_seed, load_run_config, peak_rss_mb,
                              restore, seed_everything)
    from dsgraph.sar.model import allreduce_gradients, broadcast_parameters, prepare_model
    from dsgraph.sar.worker import setup_worker

    t_start = time.perf_counter()
    cfg = load_run_config(run_dir)
    rank, world = init_gloo(cfg.sar.timeout_s)
    w = setup_worker(part_config_path(cfg), rank, world, cfg.sar.mode, cfg.sar.prefetch)
    nd = w.part.ndata
    dtype = getattr(torch, cfg.train.dtype)
    x = nd["feat"].to(dtype)
    label = nd["label"].long()
    masks = {k: w.local_mask(f"{k}_mask") for k in ("train", "val", "test")}
    counts = dict(zip(masks, _allsum([float(m.sum()) for m in masks.values()])))
    if counts["train"] == 0:
        raise DataError(f"{part_config_path(cfg)}: no node has train_mask set")
    max_label = torch.tensor([int(label.max()) if label.numel() else 0])
    dist.all_reduce(max_label, op=dist.ReduceOp.MAX)

    seed_everything(cfg.train.seed)
    model = build_model(cfg.model.name, x.shape[1], int(max_label) + 1, cfg.model.args).to(dtype)
    prepare_model(model)
    broadcast_parameters(model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr,
                           weight_decay=cfg.train.weight_decay)
    start_epoch = restore(run_dir, model, opt)
    log = MetricsLog(run_dir, resume_epoch=start_epoch - 1) if rank == 0 else None
    acc = {"val_acc": None, "test_acc": None}
    for epoch in range(start_epoch, cfg.train.epochs + 1):
        # Per-epoch seeds: a resumed run draws the same dropout masks as an uninterrupted one.
        seed_everything(epoch_seed(cfg.train.seed, epoch, rank))
        sent0 = w.comm.bytes_sent
        t0 = time.perf_counter()
        model.train()
        with compression_context(cfg.compression):  # the loss outside: see train/sampled.py
            logits = model(w.graph, x)
        tr = masks["train"]
        loss = F.cross_entropy(logits[tr], label[tr], reduction="sum") / counts["train"]
        opt.zero_grad()
        loss.backward()
        allreduce_gradients(model)
        opt.step()
        epoch_s = time.perf_counter() - t0
        correct = float((logits.detach()[tr].argmax(1) == label[tr]).sum())
        del logits
        if epoch % cfg.sar.eval_every == 0 or epoch == cfg.train.epochs:
            acc = _evaluate(model, w, x, label, masks, counts)
        loss_sum, correct_sum, sent = _allsum([loss.item(), correct, w.comm.bytes_sent - sent0])
        t = torch.tensor([epoch_s])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rss = [None] * world
        dist.all_gather_object(rss, peak_rss_mb())
        rec = {"epoch": epoch, "loss": loss_sum, "train_acc": correct_sum / counts["train"],
               **acc, "epoch_s": float(t), "bytes_sent": int(sent),
               "peak_rss_mb": max(rss), "peak_rss_mb_per_worker": rss}
        if rank == 0:
            end_epoch(run_dir, log, rec, model, opt)
            print(f"epoch {epoch}: loss {rec['loss']:.4f} train {rec['train_acc']:.4f} "
                  f"val {rec['val_acc'] if rec['val_acc'] is None else round(rec['val_acc'], 4)} "
                  f"({rec['epoch_s']:.2f} s, {rec['bytes_sent'] / 2**20:.1f} MiB sent)",
                  flush=True)
    rss = [None] * world
    dist.all_gather_object(rss, peak_rss_mb())
    if rank == 0:
        records = log.records()
        final = records[-1] if records else {}
        log.summary({"test_acc": final.get("test_acc"), "val_acc": final.get("val_acc"),
                     "epochs": cfg.train.epochs, "wall_s": time.perf_counter() - t_start,
                     "peak_rss_mb": max(rss), "num_trainers": world, "num_parts": world,
                     "mode": "sar", "sar_mode": cfg.sar.mode})
    dist.barrier()


def _evaluate(model, w, x, label, masks, counts) -> dict:
    """Full-graph accuracy on the validation and test nodes (all workers take part)."""
    model.eval()
    with torch.no_grad():
        pred = model(w.graph, x).argmax(1)
    vals = _allsum([float((pred[masks[k]] == label[masks[k]]).sum()) for k in ("val", "test")])
    return {f"{k}_acc": (v / counts[k] if counts[k] else None)
            for k, v in zip(("val", "test"), vals)}


def main() -> None:
    """Worker entry: ``python -m train.fullbatch --run-dir RUN``."""
    from dsgraph.cluster.worker import run_process_main
    parser = argparse.ArgumentParser(prog="python -m train.fullbatch")
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args()
    run_process_main(worker_main, args.run_dir)


if __name__ == "__main__":
    main()
